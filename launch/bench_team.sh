#!/usr/bin/env bash
# The pretrained team's step time (rollout / main update / sub update) and
# peak host memory by batch size, up to the largest B x K within a memory
# limit (bench.team_memory), then the one summary table with it:
#   bash launch/bench_team.sh [OUT] [--sizes=4x4,8x4,8x8,16x8] [--limit_gib=24]
#       [--plan_sizes=16x16]   (sizes only estimated, not run)
# (default OUT: runs/bench). Every size starts from the config's own warm
# start (SFT once, unless an earlier run of configs/smollm2.py left it in
# the cache).
# Run it on a quiet machine: the figures are wall-clock medians.
set -euo pipefail
out="${1:-runs/bench}"
shift || true
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
mkdir -p "$out"
python -m mgrpo_jax.bench.team_memory --json="$out/team.json" "$@"
python -m mgrpo_jax.bench.summary "$out"
