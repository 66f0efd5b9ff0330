#!/usr/bin/env bash
# One TPU VM (a single host: v4-8, v5e-8, v6e-8, ...): the main agent and the
# sub-agent(s) in one process (--role=all), each agent on its own slice of
# the VM's chips; the store is a directory of the run.
#
#   CONFIG=configs/smollm2.py RUN_DIR=runs/smollm2-tpu bash launch/tpu_vm.sh \
#       --config.mesh.share=False --config.mesh.main.devices=4 \
#       --config.mesh.sub.devices=4 [--config.FIELD=VALUE ...]
#
# Required: CONFIG   the config file (a relative path is taken from the
#                    directory you run this from)
#           RUN_DIR  metrics (RUN_DIR/all), checkpoints, and the store
# Optional: STORE_ROOT  the store (default RUN_DIR/store; gs://... allowed)
#           EXTRAS      setup.py extras installed (default "tpu": jax[tpu]);
#                       EXTRAS=test on a machine without TPUs
#           JAX_PLATFORMS  JAX's choice of devices (e.g. cpu); unset: the
#                       TPU where libtpu finds one, else the CPU
# Arguments go to python -m mgrpo_jax.main. Prints the command it runs, then
# the run's own lines (README "Launching").
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"
run_all_roles tpu_vm tpu "$@"
