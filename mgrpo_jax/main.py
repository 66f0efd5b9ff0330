"""Entry point: `python -m mgrpo_jax.main --config configs/default.py`.

A bad command line or config (no such file, a misspelt field, a value the
checks refuse) ends the program before anything is computed or written, with
one line on stderr and exit code 2.
"""

from __future__ import annotations

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from mgrpo_jax.training import config_checks
from mgrpo_jax.training import run_checks
from mgrpo_jax.training import toy

TASKS = (run_checks.TASK, "toy_delegation")  # What config.task may name.

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a config file with get_config().",
    lock_config=True)
_ROLE = flags.DEFINE_enum(
    "role", "all", ["all", "main", "sub"],
    "Which side of an M-GRPO run this process is: 'all' (both, one "
    "process), or 'main' / 'sub' as two processes sharing config.store.")


def main(argv: list[str]) -> None:
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
  logging.info("done: greedy accuracy %.3f (step 0: %.3f), main reward %.3f",
               metrics["eval/greedy_accuracy"],
               metrics["eval/greedy_accuracy_start"],
               metrics.get("main/reward", float("nan")))


def _train_agents(config) -> None:
  from mgrpo_jax.models.loading import enable_compilation_cache
  from mgrpo_jax.training import trainer
  from mgrpo_jax.training.store import StoreError
  enable_compilation_cache()
  try:
    metrics = trainer.run(config, role=_ROLE.value, log=logging.info)
  except config_checks.ConfigError as e:  # E.g. too few devices.
    config_checks.usage_error(str(e))
  except StoreError as e:  # The other side is gone or the store broke.
    logging.error("%s", e)
    raise SystemExit(f"stopped: {e}") from e
  logging.info("done: %s", {k: round(v, 4) for k, v in metrics.items()})


if __name__ == "__main__":
  app.run(main, flags_parser=config_checks.parse_flags)
