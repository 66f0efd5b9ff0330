"""Entry point: `python -m mgrpo_jax.main --config configs/default.py`.

A bad command line or config (no such file, a misspelt field, a value the
checks refuse) ends the program before anything is computed or written, with
one line on stderr and exit code 2.

What it prints (runtime/logs.py): the project's lines (the world built, the
warm start, a progress bar, one line per evaluation, a summary at the end);
libraries' INFO logs only with --verbosity=1.

One role may span several processes (hosts), its mesh over all their devices
(runtime/distributed.py): `--distributed=auto` (Cloud TPU pod slices: JAX
detects the rest) or `--distributed=explicit --coordinator_address=HOST:PORT
--num_processes=N --process_id=I` joins this process to the role's JAX
distributed system before any JAX computation, after the config checks.
"""

from __future__ import annotations

import os
import time

from absl import app
from absl import flags
from ml_collections import config_flags

from mgrpo_jax.runtime import config_checks
from mgrpo_jax.runtime import distributed
from mgrpo_jax.runtime import logs
from mgrpo_jax.train import run_checks
from mgrpo_jax import toy

TASKS = (run_checks.TASK, "toy_delegation")  # What config.task may name.
ROLL_CALL_S = 30.0  # How long a failing process waits to learn who is left.

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a config file with get_config().",
    lock_config=True)
_ROLE = flags.DEFINE_string(
    "role", "all",
    "Which side of an M-GRPO run this process is: 'all' (every agent, one "
    "process), 'main', or a sub-agent kind of config.agents.sub_kinds "
    "('sub', 'verifier'): one process per side, sharing config.store.")
_DISTRIBUTED = flags.DEFINE_enum(
    "distributed", "off", distributed.MODES,
    "Whether this process is one of several running the role, its mesh over "
    "all their devices (jax.distributed.initialize): 'off' (one process), "
    "'auto' (JAX detects the coordinator and this process's id: Cloud TPU "
    "pod slices, Slurm, Open MPI) or 'explicit' (--coordinator_address, "
    "--num_processes, --process_id).")
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address", None,
    "With --distributed=explicit: host:port where process 0 of this role "
    "serves the JAX coordinator (every process of the role gives the same).")
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None,
    "With --distributed=explicit: how many processes run this role.")
_DISTRIBUTED_TIMEOUT = flags.DEFINE_integer(
    "distributed_timeout_s", 300,
    "With --distributed: how long a process waits for the role's "
    "coordinator and the other processes to join.", lower_bound=1)
_HEARTBEAT = flags.DEFINE_integer(
    "heartbeat_timeout_s", distributed.HEARTBEAT_TIMEOUT_S,
    "With --distributed: a process of the role silent this long (dead, "
    "killed, preempted) makes JAX end the others, naming it.",
    lower_bound=1)
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", None,
    "With --distributed=explicit: this process's id, 0 .. num_processes-1.")


def main(argv: list[str]) -> None:
  logs.configure()  # After absl parsed --verbosity, before any library logs.
  if len(argv) > 1:
    config_checks.usage_error(f"unexpected arguments {argv[1:]} (config "
                              "fields are set as --config.FIELD=VALUE).")
  config = _CONFIG.value
  if config is None:
    config_checks.usage_error("--config is required, e.g. --config "
                              "configs/default.py")
  try:
    task = config_checks.choice(config, "task", TASKS)
    if task == run_checks.TASK:
      run_checks.check_run_config(config, _ROLE.value)
    else:
      toy.validate(config)
    distributed.check_args(_DISTRIBUTED.value, _COORDINATOR.value,
                           _NUM_PROCESSES.value, _PROCESS_ID.value)
  except config_checks.ConfigError as e:
    config_checks.usage_error(str(e))
  _join_processes()
  if task == run_checks.TASK:
    _train_agents(config)
    return
  metrics = toy.run(config)
  logs.say(f"done: greedy accuracy {metrics['eval/accuracy']:.3f} "
           f"(step 0: {metrics['eval/accuracy_start']:.3f}), main "
           f"reward {metrics.get('main/reward', float('nan')):.3f}")


def _join_processes() -> None:
  """jax.distributed.initialize as the flags ask (nothing with 'off'). An
  error JAX raises (e.g. JAX already started), or an explicit coordinator
  that does not answer within --distributed_timeout_s, ends the run with
  one line, exit 1 (runtime/distributed.py)."""
  try:
    joined = distributed.initialize(
        _DISTRIBUTED.value, _COORDINATOR.value, _NUM_PROCESSES.value,
        _PROCESS_ID.value, timeout_s=_DISTRIBUTED_TIMEOUT.value,
        heartbeat_timeout_s=_HEARTBEAT.value)
  except config_checks.ConfigError as e:  # No coordinator answered.
    raise SystemExit(f"stopped: {e}") from e
  except (RuntimeError, ValueError) as e:
    raise SystemExit(
        f"stopped: jax.distributed.initialize (--distributed="
        f"{_DISTRIBUTED.value}) failed: {e}") from e
  if joined:
    logs.say(f"jax.distributed: {distributed.describe()}")


def _train_agents(config) -> None:
  from mgrpo_jax.models.loading import enable_compilation_cache
  from mgrpo_jax.train import trainer
  from mgrpo_jax.runtime.store import StoreError
  from mgrpo_jax.data.records import DataError
  enable_compilation_cache()
  start = time.perf_counter()
  try:
    metrics = trainer.run(config, role=_ROLE.value, log=logs.say)
  except (config_checks.ConfigError, DataError) as e:  # Too few devices,
    config_checks.usage_error(str(e))  # a data file that cannot be read.
  except StoreError as e:  # The other side is gone or the store broke.
    _stop_role(e)  # Several processes: all of them stop now.
    raise SystemExit(f"stopped: {e}") from e  # One line on stderr, exit 1.
  except Exception as e:  # pylint: disable=broad-except
    _stop_role(e)
    raise
  for line in summary(config, _ROLE.value, metrics,
                      time.perf_counter() - start):
    logs.say(line)


def _stop_role(error: Exception) -> None:
  """A role over several processes that fails in one of them (a process
  died under a collective, a wait ran out): this process says which
  processes stopped answering and exits at once (exit 1), instead of
  waiting in JAX's shutdown for a process that will never come. One
  process: nothing (the error is raised as usual)."""
  import jax
  from mgrpo_jax.runtime import processes
  if jax.process_count() == 1:
    return
  what = (str(error).strip().splitlines() or [type(error).__name__])[-1]
  line = f"stopped: {what}"
  if not isinstance(error, processes.ProcessTimeout):  # It names them.
    missing = processes.absent(ROLL_CALL_S)
    who = ("process 0 (the coordinator) is gone" if missing is None else
           f"process(es) {missing} stopped answering" if missing else
           "every process of the role is still here")
    line = (f"stopped: process {processes.index()} of "
            f"{processes.count()}: {type(error).__name__}: {what}; {who}. "
            "Everything up to the last finished step is saved: start every "
            "process of the role again to resume.")
  import sys
  import traceback
  logs.detail("".join(traceback.format_exception(error)))  # --verbosity=1
  sys.stdout.flush()
  sys.stderr.write(line + "\n")
  sys.stderr.flush()
  os._exit(1)  # pylint: disable=protected-access


def summary(config, role: str, metrics: dict[str, float],
            seconds: float) -> list[str]:
  """The lines that end a run: steps, final accuracies, wall time, and where
  the metrics (train/trainer.py) and checkpoints (train/side.py) are."""
  scores = "".join(f", final {k} {metrics[k]:.3f}" for k in (
      "eval/accuracy", "test/accuracy") if k in metrics)
  run_dir = config.run_dir
  return [f"done: {config.train.steps} steps in {seconds:.0f} s{scores}",
          f"metrics: {os.path.join(run_dir, role, 'metrics.jsonl')} "
          f"(python -m mgrpo_jax.plot {os.path.join(run_dir, role)}); "
          f"checkpoints: {os.path.join(run_dir, 'checkpoints')}"]


if __name__ == "__main__":
  app.run(main, flags_parser=config_checks.parse_flags)
