"""Entry point: `python -m mgrpo_jax.main --config configs/default.py`."""

from __future__ import annotations

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from mgrpo_jax.training import config_checks
from mgrpo_jax.training import toy

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a config file with get_config().",
    lock_config=True)
_ROLE = flags.DEFINE_enum(
    "role", "all", ["all", "main", "sub"],
    "Which side of an M-GRPO run this process is: 'all' (both, one "
    "process), or 'main' / 'sub' as two processes sharing config.store.")


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]} (config fields "
                         "are set as --config.FIELD=VALUE).")
  config = _CONFIG.value
  if config is None:
    raise app.UsageError("--config is required, e.g. --config "
                         "configs/default.py")
  if config.get("task", "toy_delegation") == "agents":
    from mgrpo_jax.models.loading import enable_compilation_cache
    from mgrpo_jax.training import trainer
    from mgrpo_jax.training.store import StoreError
    enable_compilation_cache()
    try:
      metrics = trainer.run(config, role=_ROLE.value, log=logging.info)
    except config_checks.ConfigError as e:
      raise app.UsageError(str(e)) from e
    except StoreError as e:  # The other side is gone or the store broke.
      logging.error("%s", e)
      raise SystemExit(f"stopped: {e}") from e
    logging.info("done: %s", {k: round(v, 4) for k, v in metrics.items()})
    return
  try:
    metrics = toy.run(config)
  except config_checks.ConfigError as e:
    raise app.UsageError(str(e)) from e
  logging.info("done: greedy accuracy %.3f (step 0: %.3f), main reward %.3f",
               metrics["eval/greedy_accuracy"],
               metrics["eval/greedy_accuracy_start"],
               metrics.get("main/reward", float("nan")))


if __name__ == "__main__":
  app.run(main)
