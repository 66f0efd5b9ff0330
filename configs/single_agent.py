"""Single-agent GRPO baseline: one tiny model searches and visits itself (no sub-agent).

`python -m mgrpo_jax.main --config configs/single_agent.py`: configs/default.py
with `mode="single"` and its own run directory; every other field (and its
comment) is there.
"""

import pathlib

import ml_collections

from mgrpo_jax.runtime.config_checks import load_config_file


def get_config() -> ml_collections.ConfigDict:
  path = pathlib.Path(__file__).with_name("default.py")
  config = load_config_file(str(path))
  config.mode = "single"  # The baseline: see configs/default.py for every field.
  config.run_dir = "runs/single_agent"  # Metrics, checkpoints and the store of this baseline.
  # One agent searches and visits for every hop, then answers: 2 turns per
  # hop and one to answer.
  config.agents.main.max_turns = 2 * config.world.max_hops + 1  # The single agent's turns.
  return config
