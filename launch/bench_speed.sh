#!/usr/bin/env bash
# Sampler and train-step speed, ours against PyTorch, in one run (issue 3).
#   bash launch/bench_speed.sh [--batches=8,32] [--json=runs/bench_speed.json]
set -euo pipefail
EXTRAS="test"  # torch is a test/benchmark-only dependency
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# Google's Tunix sampler, the benchmark's third column (without it the column
# says why). --no-deps: its declared dependencies would downgrade transformers
# and safetensors; its sampler and llama3 model need only these three more.
TUNIX_VERSION="0.1.7"
if ! python -c "import importlib.metadata as m, sys
[m.version(p) for p in ('jaxtyping', 'wadler-lindig', 'sentencepiece')]
sys.exit(m.version('google-tunix') != '$TUNIX_VERSION')" 2>/dev/null; then
  echo "[mgrpo_jax] installing google-tunix==$TUNIX_VERSION (--no-deps)" >&2
  python -m pip install --disable-pip-version-check --no-warn-conflicts -q \
      --no-deps "google-tunix==$TUNIX_VERSION" jaxtyping==0.3.11 \
      wadler-lindig==0.1.8 sentencepiece==0.2.3 \
      2> >(grep -v "is ignored: it is neither a file nor a directory" >&2) \
    || echo "[mgrpo_jax] google-tunix install failed; its column says why" >&2
fi
exec python -m mgrpo_jax.bench.speed "$@"
