#!/usr/bin/env bash
# Quickstart command 1: set up, then run the main job on the embedded default.
#   bash launch/train.sh [--config.FIELD=VALUE ...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec python -m mgrpo_jax.main --config configs/default.py "$@"
