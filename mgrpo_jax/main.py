"""Entry point: `python -m mgrpo_jax.main --config configs/default.py`.

A bad command line or config (no such file, a misspelt field, a value the
checks refuse) ends the program before anything is computed or written, with
one line on stderr and exit code 2.

What it prints (runtime/logs.py): the project's lines (the world built, the
warm start, a progress bar, one line per evaluation, a summary at the end);
libraries' INFO logs only with --verbosity=1.
"""

from __future__ import annotations

import os
import time

from absl import app
from absl import flags
from ml_collections import config_flags

from mgrpo_jax.runtime import config_checks
from mgrpo_jax.runtime import logs
from mgrpo_jax.train import run_checks
from mgrpo_jax import toy

TASKS = (run_checks.TASK, "toy_delegation")  # What config.task may name.

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a config file with get_config().",
    lock_config=True)
_ROLE = flags.DEFINE_string(
    "role", "all",
    "Which side of an M-GRPO run this process is: 'all' (every agent, one "
    "process), 'main', or a sub-agent kind of config.agents.sub_kinds "
    "('sub', 'verifier'): one process per side, sharing config.store.")


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
  except config_checks.ConfigError as e:
    config_checks.usage_error(str(e))
  if task == run_checks.TASK:
    _train_agents(config)
    return
  metrics = toy.run(config)
  logs.say(f"done: greedy accuracy {metrics['eval/accuracy']:.3f} "
           f"(step 0: {metrics['eval/accuracy_start']:.3f}), main "
           f"reward {metrics.get('main/reward', float('nan')):.3f}")


def _train_agents(config) -> None:
  from mgrpo_jax.models.loading import enable_compilation_cache
  from mgrpo_jax.train import trainer
  from mgrpo_jax.runtime.store import StoreError
  enable_compilation_cache()
  start = time.perf_counter()
  try:
    metrics = trainer.run(config, role=_ROLE.value, log=logs.say)
  except config_checks.ConfigError as e:  # E.g. too few devices.
    config_checks.usage_error(str(e))
  except StoreError as e:  # The other side is gone or the store broke.
    raise SystemExit(f"stopped: {e}") from e  # One line on stderr, exit 1.
  for line in summary(config, _ROLE.value, metrics,
                      time.perf_counter() - start):
    logs.say(line)


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
