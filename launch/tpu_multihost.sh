#!/usr/bin/env bash
# Multi-host TPU: one role of a run (ROLE=main, or a sub-agent kind such as
# sub) on the host(s) of its own TPU slice or host group; the roles meet only
# through the store, a gs:// bucket both reach. Run it on every host of every
# role, e.g. with two slices "main-tpu" and "sub-tpu":
#
#   gcloud compute tpus tpu-vm ssh main-tpu --worker=all --command="cd mgrpo_jax && \
#     ROLE=main DISTRIBUTED=auto CONFIG=configs/smollm2.py RUN_DIR=gs://BUCKET/y \
#     STORE_ROOT=gs://BUCKET/y/store bash launch/tpu_multihost.sh"
#   gcloud compute tpus tpu-vm ssh sub-tpu --worker=all --command="cd mgrpo_jax && \
#     ROLE=sub DISTRIBUTED=auto CONFIG=configs/smollm2.py RUN_DIR=gs://BUCKET/y \
#     STORE_ROOT=gs://BUCKET/y/store bash launch/tpu_multihost.sh"
#
# (A backslash ends every line of the quoted command but the last: the
# host's shell reads one command. The roles must share the overrides of the
# store's fingerprint, README "Launching".)
#
# Required: ROLE        main, or a kind of config.agents.sub_kinds (sub, ...)
#           CONFIG      the config file, the same on every host
#           RUN_DIR     this role's metrics (RUN_DIR/ROLE) and checkpoints
#           STORE_ROOT  the store shared by the roles: gs://BUCKET/PREFIX (a
#                       directory works only on a filesystem all hosts share)
#           DISTRIBUTED how this role's processes find each other
#                       (jax.distributed.initialize, once per role):
#             off       one process (one host) runs the role
#             auto      JAX detects the coordinator, the number of processes
#                       and this one's id (a whole TPU slice per role)
#             explicit  from COORDINATOR_ADDRESS (host:port of this role's
#                       process 0), NUM_PROCESSES and PROCESS_ID (0..N-1),
#                       then all three required (host groups JAX cannot
#                       detect, or processes on one machine)
# Optional: EXTRAS      setup.py extras installed (default "tpu": jax[tpu]);
#                       EXTRAS=test on a machine without TPUs
#           JAX_PLATFORMS  JAX's choice of devices (e.g. cpu)
# Arguments go to python -m mgrpo_jax.main (e.g. --config.mesh.main.devices=8).
# Prints the command it runs ("[mgrpo_jax] tpu_multihost: python -m
# mgrpo_jax.main ... --role=main --distributed=off ..."), then the run's own
# lines (README "Launching").
#
# Expects the VMs (gcloud compute tpus tpu-vm create NAME
# --accelerator-type=v5litepod-8 --version=RUNTIME, the chip's TPU software
# version, e.g. v2-alpha-tpuv5-lite for v5e), the repository at ~/mgrpo_jax
# on every host, and a bucket both VMs' service account can read and write
# (the store's gs:// backend uses gcsfs with the VM's default credentials).
# DISTRIBUTED=auto and explicit make one role's processes on several hosts
# one JAX distributed system (mgrpo_jax/runtime/distributed.py): each host
# rolls out its own share of the step's questions (train.rollout_shards),
# the learners span every host's chips, process 0 writes the metrics and
# the store's records. Orbax checkpoints hold every host's shards, so a
# role over several hosts needs a RUN_DIR all its hosts reach: gs://BUCKET/
# PREFIX (everything of the run goes there) or a shared mount. With
# DISTRIBUTED=off RUN_DIR may be the host's own.
# A STORE_ROOT that is not gs:// is accepted with a warning (every host
# must see it).
#
# Tested (tests/launch_test.py, in the slow run: half a minute to a minute
# on 2 cores): both roles on localhost, each a one-process JAX distributed
# system (DISTRIBUTED=explicit), through a local store; a role over two
# processes of two CPU devices each, in tests/multihost_test.py (slow). Untested, for want
# of TPUs, a bucket and several hosts: any run on a TPU, DISTRIBUTED=auto
# (JAX's TPU detection) and explicit across real hosts (only localhost), a
# gs:// store on real GCS between hosts (the store's gs:// backend is tested
# against an emulator, tests/store_test.py), the gcloud commands, and two
# roles as host groups of one TPU slice (JAX's detection sees the whole
# slice, and splitting it needs libtpu's topology variables per group).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$here/lib.sh"
required=("ROLE|main, or a sub-agent kind such as sub"
          "CONFIG|the config file, e.g. configs/smollm2.py"
          "RUN_DIR|this role's metrics and checkpoints directory"
          "STORE_ROOT|the store both roles share, gs://BUCKET/PREFIX"
          "DISTRIBUTED|off (one process per role), auto (TPU slice) or explicit")
if [[ "${DISTRIBUTED:-}" == explicit ]]; then
  required+=("COORDINATOR_ADDRESS|host:port of process 0 of this role"
             "NUM_PROCESSES|how many processes run this role"
             "PROCESS_ID|this process's id, 0 .. NUM_PROCESSES-1")
fi
require_vars "${required[@]}"
case "$DISTRIBUTED" in
  off | auto) distributed=("--distributed=$DISTRIBUTED") ;;
  explicit) distributed=(--distributed=explicit
                         "--coordinator_address=$COORDINATOR_ADDRESS"
                         "--num_processes=$NUM_PROCESSES"
                         "--process_id=$PROCESS_ID") ;;
  *) echo "error: DISTRIBUTED=$DISTRIBUTED: expected off, auto or explicit;" \
          "$(basename "$0") started nothing." >&2
     exit 2 ;;
esac
if [[ "$STORE_ROOT" != gs://* ]]; then
  echo "[mgrpo_jax] tpu_multihost: STORE_ROOT=$STORE_ROOT is not gs://: every" \
       "host of every role must see this directory" >&2
fi
args=(--config "$(absolute "$CONFIG")" "--role=$ROLE" "${distributed[@]}"
      "--config.run_dir=$(absolute "$RUN_DIR")"
      "--config.store.root=$(absolute "$STORE_ROOT")")
EXTRAS="${EXTRAS-tpu}"
# shellcheck source=env.sh
source "$here/env.sh"
echo "[mgrpo_jax] tpu_multihost: python -m mgrpo_jax.main ${args[*]} $*" >&2
exec python -m mgrpo_jax.main "${args[@]}" "$@"
