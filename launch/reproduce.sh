#!/usr/bin/env bash
# The paper's comparison at small scale (README "Reproducing the paper"):
#   bash launch/reproduce.sh [--quick] [--out DIR] [--suite main,clean|ablations]
#                            [--arms frozen_sub,mgrpo,mgrpo_no_credit,mgrpo_expert,single_agent]
#                            [--seeds N] [--protocol PROTOCOL.md|none]
#   bash launch/reproduce.sh --pilot [--out DIR] [--settings A,B] [--steps N]
# Sets up like launch/train.sh, then runs every arm x seed (a killed run
# resumes with the same command; a finished --out is refused). The main
# suite is checked against launch/results/reproduce/PROTOCOL.md before any
# run. --pilot runs the task pilot instead (validation split only).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
if [[ "${1:-}" == "--pilot" ]]; then
  shift
  exec python -m mgrpo_jax.reproduce_pilot "$@"
fi
exec python -m mgrpo_jax.reproduce "$@"
