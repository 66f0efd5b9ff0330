"""M-GRPO's math: pure functions over arrays, usable under jax.jit.

Nothing here imports the rest of mgrpo_jax or any model; other JAX projects
import these directly (also re-exported at `mgrpo_jax`).
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
