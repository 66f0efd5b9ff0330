#!/usr/bin/env bash
# Sampler and train-step speed, ours against PyTorch, in one run (issue 3).
#   bash launch/bench_speed.sh [--batches=8,32] [--json=runs/bench_speed.json]
set -euo pipefail
EXTRAS=test  # torch is a test/benchmark-only dependency
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec python -m mgrpo_jax.bench.speed "$@"
