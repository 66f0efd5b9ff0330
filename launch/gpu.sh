#!/usr/bin/env bash
# One GPU host: the main agent and the sub-agent(s) in one process
# (--role=all). On one GPU the agents share it (config.mesh.share=True, the
# configs' default); on several, give each agent its own GPUs:
#
#   CONFIG=configs/smollm2.py RUN_DIR=runs/smollm2-gpu bash launch/gpu.sh \
#       [--config.mesh.share=False --config.mesh.main.devices=1 \
#        --config.mesh.sub.devices=1] [--config.FIELD=VALUE ...]
#
# Required: CONFIG   the config file (a relative path is taken from the
#                    directory you run this from)
#           RUN_DIR  metrics (RUN_DIR/all), checkpoints, and the store
# Optional: STORE_ROOT  the store (default RUN_DIR/store; gs://... allowed)
#           EXTRAS      setup.py extras installed (default "gpu":
#                       jax[cuda12]); EXTRAS=test on a machine without GPUs
#           CUDA_VISIBLE_DEVICES  which GPUs the process sees
#           JAX_PLATFORMS  JAX's choice of devices (e.g. cpu); unset: the
#                       GPU where the CUDA plugin finds one, else the CPU
# Arguments go to python -m mgrpo_jax.main. Prints the command it runs
# ("[mgrpo_jax] gpu: python -m mgrpo_jax.main ..."), then the run's own
# lines (README "Launching").
#
# Expects an NVIDIA driver for CUDA 12 (the gpu extra installs jax[cuda12]
# with CUDA and cuDNN as pip wheels). Tested (tests/launch_test.py, in the
# slow run: about half a minute on 2 cores): a tiny one-step run on one CPU
# device (JAX_PLATFORMS=cpu EXTRAS=test). Untested: any run on a GPU, and
# installing the gpu extra (jax-cuda12-plugin 0.10.2, which jax 0.10.2's
# extra asks for, is on PyPI; what pip resolves on Python 3.12 was not
# checked).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"
run_all_roles gpu gpu "$@"
