# shellcheck shell=bash
# Sourced by launch/tpu_vm.sh, tpu_multihost.sh, gpu.sh and two_processes.sh
# first, before launch/env.sh sets anything up: their checks of the
# environment variables they read, and paths made absolute.

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
