"""Multi-agent GRPO baseline with the sub-agent frozen: only the main agent trains.

`python -m mgrpo_jax.main --config configs/frozen_sub.py`: configs/default.py
with `mode="frozen_sub"` and its own run directory; every other field (and its
comment) is there.
"""

import importlib.util
import pathlib

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  path = pathlib.Path(__file__).with_name("default.py")
  spec = importlib.util.spec_from_file_location("default", path)
  base = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(base)
  config = base.get_config()
  config.mode = "frozen_sub"  # The baseline: see configs/default.py for every field.
  config.run_dir = "runs/frozen_sub"  # Metrics, checkpoints and the store of this baseline.
  return config
