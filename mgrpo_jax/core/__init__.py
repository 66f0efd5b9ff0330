"""M-GRPO's math: pure functions over arrays, usable under jax.jit.

Nothing here imports the rest of mgrpo_jax or any model; other JAX projects
import these directly (also re-exported at `mgrpo_jax`).

  advantages.py   group-relative advantages (group / batch / none)
  alignment.py    variable sub-agent calls -> fixed [R, D_max] slots
  losses.py       clipped policy loss, aggregations
  importance.py   truncated importance weights for stale data
  rewards.py      main / sub rewards, reward presets
  scoring.py      GAIA normalised match, token F1
  registry.py     name -> function tables chosen by configs
  checks.py       argument checks with errors that teach

Static arguments (`num_groups`, `d_max`, `scale`, `fill`, `aggregation`,
`eps*`, `beta`) fix shapes or code paths: close over them or pass them as
`static_argnames` when you `jax.jit` the functions directly. Bad arguments
raise a `ValueError` at trace time (checks.py); group ids out of range and
negative counts are checked on the values, eagerly when they are concrete
and by a host callback that fails the computation when they are traced.
"""

from mgrpo_jax.core.advantages import group_relative_advantages
from mgrpo_jax.core.alignment import align_sub_trajectories
from mgrpo_jax.core.losses import clipped_policy_loss, policy_loss_terms
from mgrpo_jax.core.registry import (ADVANTAGE_SCALES, LOSS_AGGREGATIONS,
                                     REWARD_PRESETS, Registry)
from mgrpo_jax.core.rewards import main_reward, reward_weights, sub_reward
from mgrpo_jax.core.scoring import normalized_match, token_f1

__all__ = [
    "ADVANTAGE_SCALES",
    "LOSS_AGGREGATIONS",
    "REWARD_PRESETS",
    "Registry",
    "align_sub_trajectories",
    "clipped_policy_loss",
    "group_relative_advantages",
    "main_reward",
    "normalized_match",
    "policy_loss_terms",
    "reward_weights",
    "sub_reward",
    "token_f1",
]
