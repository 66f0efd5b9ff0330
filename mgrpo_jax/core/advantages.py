"""Group-relative advantages (GRPO), for the main agent and for sub-agents.

Shape letters: N samples (flat), G groups.

For the main agent a group is the K rollouts of one question; for a sub-agent
it is the valid aligned sub-trajectories of one question (or of one rollout).
Each agent's advantages use only its own rewards.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mgrpo_jax.core import checks
from mgrpo_jax.core.registry import ADVANTAGE_SCALES

_FN = "group_relative_advantages"


@ADVANTAGE_SCALES.register("group")
def _scale_group(dev_N, group_std_N, batch_std, eps):
  """GRPO: divide by the std of the sample's own group."""
  del batch_std
  return dev_N / (group_std_N + eps)


@ADVANTAGE_SCALES.register("batch")
def _scale_batch(dev_N, group_std_N, batch_std, eps):
  """Divide by the std of all valid rewards in the batch."""
  del group_std_N
  return dev_N / (batch_std + eps)


@ADVANTAGE_SCALES.register("none")
def _scale_none(dev_N, group_std_N, batch_std, eps):
  """Dr. GRPO (Liu et al. 2025): no division, only the group mean removed."""
  del group_std_N, batch_std, eps
  return dev_N


def group_relative_advantages(
    rewards_N: jax.Array,
    group_ids_N: jax.Array,
    num_groups: int,
    *,
    valid_N: jax.Array | None = None,
    scale: str = "group",
    eps: float = 1e-6,
) -> jax.Array:
  """Advantage of each sample relative to the other samples of its group.

  adv = (r - mean_g) / (std_g + eps) for scale="group", where mean_g and the
  unbiased std_g (ddof=1) run over the valid members of the sample's group g;
  scale="batch" divides by the unbiased std of all valid rewards instead;
  scale="none" returns r - mean_g. Any name registered in
  `ADVANTAGE_SCALES` is accepted.

  Invalid samples, groups with fewer than 2 valid members and groups whose
  valid rewards are all equal get advantage exactly 0 (never NaN).

  Args:
    rewards_N: [N] float rewards.
    group_ids_N: [N] int group of each sample, in [0, num_groups).
    num_groups: static number of groups G.
    valid_N: optional [N] bool (or 0/1) mask; invalid samples take no part in
      the statistics and get 0.
    scale: name of the scale, see above.
    eps: added to the std before dividing.

  Returns:
    [N] float32 advantages.
  """
  rewards_N = checks.check_array(_FN, "rewards_N", rewards_N, ndim=1,
                                 kinds="f")
  group_ids_N = checks.check_array(_FN, "group_ids_N", group_ids_N, ndim=1,
                                   kinds="i")
  checks.check_same_shape(_FN, "group_ids_N", group_ids_N, "rewards_N",
                          rewards_N.shape)
  num_groups = checks.check_static_int(_FN, "num_groups", num_groups,
                                       minimum=1)
  scale_fn = ADVANTAGE_SCALES.get(scale, arg="scale")
  eps = checks.check_static_float(_FN, "eps", eps, minimum=0.0)
  if valid_N is None:
    valid_N = jnp.ones(rewards_N.shape, jnp.bool_)
  else:
    valid_N = checks.check_array(_FN, "valid_N", valid_N, ndim=1, kinds="bif")
    checks.check_same_shape(_FN, "valid_N", valid_N, "rewards_N",
                            rewards_N.shape)
    valid_N = valid_N.astype(jnp.bool_)
  checks.check_values_in_range(_FN, "group_ids_N", group_ids_N, 0, num_groups)

  r_N = rewards_N.astype(jnp.float32)
  w_N = valid_N.astype(jnp.float32)
  gid_N = jnp.clip(group_ids_N, 0, num_groups - 1)

  def group_sum(x_N):
    return jax.ops.segment_sum(x_N, gid_N, num_segments=num_groups)

  count_G = group_sum(w_N)
  mean_G = group_sum(r_N * w_N) / jnp.maximum(count_G, 1.0)
  dev_N = jnp.where(valid_N, r_N - mean_G[gid_N], 0.0)
  var_G = group_sum(dev_N * dev_N) / jnp.maximum(count_G - 1.0, 1.0)
  std_N = jnp.sqrt(var_G)[gid_N]

  # Exact zero-spread test (max == min), immune to rounding in the mean.
  big = jnp.finfo(jnp.float32).max
  max_G = jax.ops.segment_max(jnp.where(valid_N, r_N, -big), gid_N,
                              num_segments=num_groups)
  min_G = jax.ops.segment_min(jnp.where(valid_N, r_N, big), gid_N,
                              num_segments=num_groups)
  spread_N = (max_G > min_G)[gid_N]

  total = jnp.sum(w_N)
  batch_mean = jnp.sum(r_N * w_N) / jnp.maximum(total, 1.0)
  batch_dev_N = jnp.where(valid_N, r_N - batch_mean, 0.0)
  batch_std = jnp.sqrt(jnp.sum(batch_dev_N * batch_dev_N)
                       / jnp.maximum(total - 1.0, 1.0))

  adv_N = scale_fn(dev_N, std_N, batch_std, eps)
  keep_N = valid_N & (count_G[gid_N] >= 2) & spread_N
  return jnp.where(keep_N, adv_N, 0.0).astype(jnp.float32)
