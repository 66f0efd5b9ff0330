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
# Arguments go to python -m mgrpo_jax.main. Prints the command it runs
# ("[mgrpo_jax] tpu_vm: python -m mgrpo_jax.main --config ... --role=all
# --config.run_dir=..."), then the run's own lines (README "Launching");
# outputs in RUN_DIR/all/metrics.jsonl, RUN_DIR/checkpoints, RUN_DIR/store.
#
# Expects the repository on the VM and Python 3.11 or 3.12 with pip and
# venv; the tpu extra installs the libtpu that matches the jax installed.
# Each agent's micro-batch must split over its mesh's data axis (4-way with
# 4 chips each: --config.learner.main.micro_batch=4 and the same for sub).
# Tested (tests/launch_test.py, in the slow run: about a minute on 2 cores):
# a tiny one-step run on 8 CPU devices, 4 per agent (JAX_PLATFORMS=cpu
# EXTRAS=test). Untested: any run on a TPU, and installing the tpu extra
# (libtpu 0.0.42, which jax 0.10.2's extra asks for, is on PyPI; what pip
# resolves on Python 3.12 was not checked).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"
run_all_roles tpu_vm tpu "$@"
