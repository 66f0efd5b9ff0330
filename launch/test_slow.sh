#!/usr/bin/env bash
# The slow end-to-end checks left out of the default run (two-process roles).
#   bash launch/test_slow.sh [pytest arguments]
set -euo pipefail
EXTRAS="test"
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
MGRPO_JAX_SLOW=1 exec python -m pytest tests -m slow "$@"
