#!/usr/bin/env bash
# The paper's comparison at small scale (README "Reproducing the paper"):
#   bash launch/reproduce.sh [--quick] [--out DIR] [--suite main,clean|ablations]
#                            [--arms single_agent,frozen_sub,mgrpo,mgrpo_no_credit]
#                            [--seeds N]
# Sets up like launch/train.sh, then runs every arm x seed (a killed run
# resumes with the same command; a finished --out is refused).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec python -m mgrpo_jax.reproduce "$@"
