"""Multi-agent GRPO baseline with the sub-agent frozen: only the main agent trains.

`python -m mgrpo_jax.main --config configs/frozen_sub.py`: configs/default.py
with `mode="frozen_sub"` and its own run directory; every other field (and its
comment) is there.
"""

import pathlib

import ml_collections

from mgrpo_jax.runtime.config_checks import load_config_file


def get_config() -> ml_collections.ConfigDict:
  path = pathlib.Path(__file__).with_name("default.py")
  config = load_config_file(str(path))
  config.mode = "frozen_sub"  # The baseline: see configs/default.py for every field.
  config.run_dir = "runs/frozen_sub"  # Metrics, checkpoints and the store of this baseline.
  return config
