#!/usr/bin/env bash
# The two sides of a run as two local processes, --role=main and --role=sub,
# started in the background and sharing only a store directory. Waits for
# both; if one fails, stops the other and exits with the failed one's code;
# Ctrl-C (or SIGTERM) stops both.
#
#   CONFIG=configs/default.py RUN_DIR=runs/two bash launch/two_processes.sh \
#       [--config.FIELD=VALUE ...]
#
# Required: CONFIG   the config file (a relative path is taken from the
#                    directory you run this from)
#           RUN_DIR  metrics (RUN_DIR/main, RUN_DIR/sub), checkpoints, the
#                    processes' logs (RUN_DIR/logs/<role>.log) and the store
# Optional: STORE_ROOT  the store (default RUN_DIR/store)
#           SUB_ROLES   the sub-agent kinds, one process each (default "sub";
#                       "sub verifier" for configs/verifier.py)
#           EXTRAS      setup.py extras installed (default none)
#           JAX_PLATFORMS  JAX's choice of devices (e.g. cpu)
# Arguments go to every process's python -m mgrpo_jax.main. Prints one line
# per process ("--role=main (pid N), log RUN_DIR/logs/main.log"; each
# process's output goes to its log) and where the store, metrics and
# checkpoints are; when all finish, each role's summary ("main: done: 25
# steps in ...") and the same paths. If a process exits non-zero it prints
# the end of that log, stops the others (SIGTERM) and exits with that
# process's code; Ctrl-C or SIGTERM stops them all (exit 130 / 143). The
# same command again resumes from the checkpoints.
#
# Tested (tests/launch_test.py): it trains both roles 2 steps (the main side
# samples with the weights the sub side published), stops the others when
# one fails, and stops both on SIGINT.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"
require_vars "CONFIG|the config file, e.g. configs/default.py" \
             "RUN_DIR|the run's directory (metrics, checkpoints, logs, store)"
config_file="$(absolute "$CONFIG")"
run_path="$(absolute "$RUN_DIR")"
store="$(absolute "${STORE_ROOT:-$run_path/store}")"
read -r -a roles <<< "main ${SUB_ROLES:-sub}"
EXTRAS="${EXTRAS-}"
# shellcheck source=env.sh
source "$here/env.sh"

declare -A pids=()
stop_all() {  # Stops every process still running and waits for it.
  local role
  for role in "${!pids[@]}"; do
    kill -TERM "${pids[$role]}" 2>/dev/null || true
  done
  for role in "${!pids[@]}"; do
    wait "${pids[$role]}" 2>/dev/null || true
  done
  pids=()
}
on_signal() {
  echo "[mgrpo_jax] two_processes: $1: stopping ${!pids[*]}" >&2
  stop_all
  exit "$2"
}
trap 'on_signal interrupted 130' INT
trap 'on_signal terminated 143' TERM
trap stop_all EXIT

mkdir -p "$run_path/logs"
for role in "${roles[@]}"; do
  log="$run_path/logs/$role.log"
  # The background processes ignore SIGINT (bash does that without job
  # control): Ctrl-C reaches them through on_signal's SIGTERM.
  python -m mgrpo_jax.main --config "$config_file" "--role=$role" \
      "--config.run_dir=$run_path" "--config.store.root=$store" "$@" \
      > "$log" 2>&1 &
  pids[$role]=$!
  echo "[mgrpo_jax] two_processes: --role=$role (pid ${pids[$role]}), log $log" >&2
done
echo "[mgrpo_jax] two_processes: store $store; metrics $run_path/<role>/metrics.jsonl;" \
     "checkpoints $run_path/checkpoints" >&2

while ((${#pids[@]})); do
  for role in "${!pids[@]}"; do
    pid="${pids[$role]}"
    if kill -0 "$pid" 2>/dev/null; then
      continue
    fi
    rc=0
    wait "$pid" || rc=$?
    unset "pids[$role]"
    if ((rc != 0)); then
      echo "[mgrpo_jax] two_processes: --role=$role failed (exit $rc);" \
           "stopping ${!pids[*]}. The end of $run_path/logs/$role.log:" >&2
      tail -n 20 "$run_path/logs/$role.log" >&2
      stop_all
      exit "$rc"
    fi
    echo "[mgrpo_jax] two_processes: --role=$role finished" >&2
  done
  sleep 1
done
trap - EXIT
for role in "${roles[@]}"; do
  grep -E '^(done|metrics):' "$run_path/logs/$role.log" | sed "s/^/$role: /" >&2 || true
done
echo "[mgrpo_jax] two_processes: all finished; logs in $run_path/logs, metrics" \
     "in $run_path/<role>/metrics.jsonl, checkpoints in $run_path/checkpoints," \
     "store $store" >&2
