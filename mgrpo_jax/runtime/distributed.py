"""Multi-process JAX: one agent's mesh over the devices of several processes.

A role of a run (`--role=main`, `--role=sub`, or `all`) may span several
processes, e.g. the hosts of a TPU pod slice, each owning some of the
role's devices. Those processes form one JAX distributed system (one per
role: the roles still meet only through the store), which
`jax.distributed.initialize` sets up before any JAX computation; then
`jax.devices()` lists every process's devices and the role's mesh
(`runtime/meshes.py`) spans them.

`mgrpo_jax.main` reads how from its flags (`MODES`):
  * "off" (the default): one process, nothing initialised;
  * "auto": `jax.distributed.initialize()` with no arguments: JAX detects
    the coordinator, the number of processes and this process's id on a
    Cloud TPU pod slice (and under Slurm or Open MPI);
  * "explicit": `coordinator_address` (host:port of process 0, where it
    listens), `num_processes` and `process_id` (0 .. num_processes - 1),
    all three required, e.g. for several processes on one machine, GPU
    hosts, or host groups JAX cannot detect; every process of the role
    gives the same address, process 0 serves it.
Once joined, `mgrpo_jax.main` prints `jax.distributed: process I of N: L of D
devices local (<platform>)`. With "explicit", a process other than 0 first
waits up to `--distributed_timeout_s` (300 s) for something to listen at the
coordinator's address and stops with one line naming the flag if nothing
does; with "auto", a coordinator that never answers is JAX's own abort
after that time (`DEADLINE_EXCEEDED ... RegisterTask`, exit 134).

On CPU the processes' collectives go through gloo (TCP), the default of
`jax_cpu_collectives_implementation` in jax 0.10; `initialize` selects it
where the setting is unset, so CPU processes can share a mesh (what the
tests do on localhost: in tests/distributed_test.py two CPU processes
joined by jax.distributed train a tiny model on one mesh spanning both,
with the figures and weights of the same learner on two devices of one
process, bit for bit in our runs). Untested: "auto" (JAX's TPU detection)
and "explicit" across real hosts.

The trainer runs a role over several processes (train/side.py, train/
shards.py): each process rolls out its own questions on its own devices,
the learners meet in collectives, process 0 writes (runtime/processes.py).
A process that dies is noticed by the others in one of two ways: a
collective with it fails at once (the survivors print one line naming the
processes that stopped answering a roll call, `mgrpo_jax.main`, exit 1),
or it stops sending heartbeats and JAX ends every other process after
`heartbeat_timeout_s` (`--heartbeat_timeout_s`, JAX's default 100 s; its
message names the task, "Task 1 heartbeat timeout"). Either way no
process waits forever; everything up to the last finished step is saved.
"""

from __future__ import annotations

import jax

from mgrpo_jax.runtime.config_checks import ConfigError

MODES = ("off", "auto", "explicit")
CPU_COLLECTIVES = "gloo"  # Cross-process collectives of CPU devices.
HEARTBEAT_TIMEOUT_S = 100  # JAX's default: a silent process ends the rest.


def check_args(mode: str, coordinator_address: str | None,
               num_processes: int | None, process_id: int | None) -> None:
  """A ConfigError naming the flag when the arguments do not fit `mode`
  (before any JAX call: a bad command line never waits for a coordinator).
  """
  if mode not in MODES:
    raise ConfigError(f"--distributed={mode!r}: expected one of "
                      f"{list(MODES)}.")
  given = {"coordinator_address": coordinator_address,
           "num_processes": num_processes, "process_id": process_id}
  if mode != "explicit":
    extra = [f"--{name}" for name, value in given.items() if value is not None]
    if extra:
      raise ConfigError(
          f"{', '.join(extra)} given with --distributed={mode}: these are "
          "read only with --distributed=explicit ('auto' detects them).")
    return
  missing = [f"--{name}" for name, value in given.items() if value is None]
  if missing:
    raise ConfigError(
        f"--distributed=explicit needs {', '.join(missing)} (the "
        "coordinator's host:port, the number of processes and this "
        "process's id 0 .. num_processes - 1).")
  host, sep, port = coordinator_address.rpartition(":")
  if not sep or not host or not port.isdigit():
    raise ConfigError(f"--coordinator_address={coordinator_address!r}: "
                      "expected host:port, e.g. 10.0.0.2:8476.")
  if num_processes < 1:
    raise ConfigError(f"--num_processes={num_processes}: expected an "
                      "integer >= 1.")
  if not 0 <= process_id < num_processes:
    raise ConfigError(f"--process_id={process_id}: expected an integer in "
                      f"0 .. {num_processes - 1} (--num_processes="
                      f"{num_processes}).")


def initialize(mode: str, coordinator_address: str | None = None,
               num_processes: int | None = None,
               process_id: int | None = None, *,
               timeout_s: int = 300,
               heartbeat_timeout_s: int = HEARTBEAT_TIMEOUT_S) -> bool:
  """Joins this process to its role's JAX distributed system (see the
  module docstring); returns whether it did ("off": False). Must run
  before any JAX computation, `jax.devices()` included. Waits up to
  `timeout_s` for the other processes; a process silent for
  `heartbeat_timeout_s` ends the others."""
  check_args(mode, coordinator_address, num_processes, process_id)
  if mode == "off":
    return False
  if mode == "explicit" and process_id != 0:
    wait_for_coordinator(coordinator_address, timeout_s)
  if jax.config.jax_cpu_collectives_implementation is None:
    jax.config.update("jax_cpu_collectives_implementation", CPU_COLLECTIVES)
  if mode == "auto":
    jax.distributed.initialize(initialization_timeout=timeout_s,
                               heartbeat_timeout_seconds=heartbeat_timeout_s)
  else:
    jax.distributed.initialize(
        coordinator_address=coordinator_address,
        num_processes=num_processes, process_id=process_id,
        initialization_timeout=timeout_s,
        heartbeat_timeout_seconds=heartbeat_timeout_s)
  return True


def wait_for_coordinator(coordinator_address: str, timeout_s: float,
                         poll_s: float = 1.0) -> None:
  """Returns once something listens at `coordinator_address`; a
  ConfigError naming the flag after `timeout_s` (JAX's own wait would end
  the process with a C++ abort after its timeout). For the processes other
  than 0, which serves the address."""
  import socket  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  host, _, port = coordinator_address.rpartition(":")
  deadline = time.monotonic() + timeout_s
  while True:
    try:
      with socket.create_connection((host, int(port)), timeout=poll_s):
        return
    except OSError as e:
      if time.monotonic() >= deadline:
        raise ConfigError(
            f"--coordinator_address={coordinator_address}: no coordinator "
            f"answered within {timeout_s:g} s ({e}); expected process 0 of "
            "the role listening there (is it running, on that host and "
            "port, reachable through the firewall?). Raise "
            "--distributed_timeout_s if it starts slowly.") from e
      time.sleep(poll_s)


def describe() -> str:
  """This process's place, e.g. "process 1 of 2: 1 of 2 devices local"."""
  return (f"process {jax.process_index()} of {jax.process_count()}: "
          f"{jax.local_device_count()} of {jax.device_count()} devices "
          f"local ({jax.default_backend()})")
