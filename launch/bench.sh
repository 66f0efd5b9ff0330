#!/usr/bin/env bash
# Every speed figure in one command, each beside its peer and its target:
# the sampler against Hugging Face generate and Tunix, a train step against
# PyTorch (bench.speed), batched against one-at-a-time rollouts
# (bench.rollouts), one M-GRPO step of configs/default.py split by phase
# with M-GRPO's own overhead, compilations and peak memory, open shapes
# against the closed set (bench.step), and each agent's closed set of
# programs compiled at a first and a second start (bench.programs), and a
# mixture of experts against every-expert matmuls and its dense twin
# (bench.moe_speed).
# Prints one table (bench.summary) and writes OUT/bench.json.
#   bash launch/bench.sh [OUT]    (default OUT: runs/bench)
# Run it on a quiet machine: the figures are wall-clock medians.
set -euo pipefail
out="${1:-runs/bench}"
here="$(dirname "${BASH_SOURCE[0]}")"
mkdir -p "$out"
bash "$here/bench_speed.sh" --json="$out/speed.json"
EXTRAS="test"  # the same install bench_speed.sh made (torch for its peers)
source "$here/env.sh"
python -m mgrpo_jax.bench.rollouts --json="$out/rollouts.json"
python -m mgrpo_jax.bench.step --json="$out/step.json"
python -m mgrpo_jax.bench.programs --json="$out/programs.json"
python -m mgrpo_jax.bench.moe_speed --json="$out/moe_speed.json"
python -m mgrpo_jax.bench.summary "$out"
