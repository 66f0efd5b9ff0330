#!/usr/bin/env bash
# Quickstart command 2: set up (with the test extras), then run every test.
#   bash launch/test.sh [pytest arguments]
set -euo pipefail
EXTRAS="test"
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
exec python -m pytest tests "$@"
