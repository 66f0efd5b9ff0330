"""mgrpo_jax: M-GRPO (multi-agent GRPO) in JAX.

The core math is importable from the top level:

  from mgrpo_jax import (group_relative_advantages, align_sub_trajectories,
                         clipped_policy_loss, main_reward, sub_reward)
"""

from mgrpo_jax.core import *  # noqa: F401,F403  (the public core API)
from mgrpo_jax.core import __all__

__version__ = "0.1.0"
