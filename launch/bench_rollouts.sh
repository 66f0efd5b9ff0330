#!/usr/bin/env bash
# Batched multi-agent rollouts against one conversation at a time (issue 4).
#   bash launch/bench_rollouts.sh [--questions=8 --rollouts=4] [--json=runs/bench_rollouts.json]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec python -m mgrpo_jax.bench.rollouts "$@"
