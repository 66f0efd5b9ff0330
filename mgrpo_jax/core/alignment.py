"""Trajectory alignment: a variable number of sub-agent calls -> fixed slots.

Shape letters: R rollouts, S slots per rollout (S = d_max), M stored
sub-trajectories (flat).

Sub-trajectories are stored flat and rollout-major: rollout r owns flat
positions [offset_r, offset_r + counts_R[r]) with offset = exclusive cumsum of
counts. Alignment picks, for every rollout, S of its own positions:

  count >= S      S distinct positions, a uniformly random subset;
  0 < count < S   every original once, then duplicates of its own positions
                  (random ones, or the highest-reward ones with fill="best");
  count == 0      no valid slot (index 0, valid False).

The result only depends on (key, counts[, rewards]) and has a static shape, so
the sub-agent learner compiles one train step whatever the counts were.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp

from mgrpo_jax.core import checks

_FN = "align_sub_trajectories"
FILLS = ("random", "best")


def _uniform_below(u: jax.Array, n: jax.Array) -> jax.Array:
  """Integers uniform in [0, n) from uniforms u in [0, 1) (n >= 1).

  One float draw per integer keeps compilation small (no rejection loop);
  the bias, about n / 2**24, is far below what any count here can show.
  """
  return jnp.minimum(jnp.floor(u * n).astype(jnp.int32), n - 1)


def _distinct_subsets(u_RxS: jax.Array, counts_R: jax.Array,
                      s: int) -> jax.Array:
  """S distinct integers per row, uniform in [0, count) (rows need count >= S).

  Robert Floyd's algorithm: a static loop of S steps whatever the counts are,
  so it works with traced counts. The subset is uniform; the caller shuffles
  the slot order.
  """
  chosen_RxS = jnp.full(u_RxS.shape, -1, jnp.int32)
  for i in range(s):
    j_R = counts_R - s + i
    t_R = _uniform_below(u_RxS[:, i], jnp.maximum(j_R + 1, 1))
    taken_R = jnp.any(chosen_RxS == t_R[:, None], axis=1)
    chosen_RxS = chosen_RxS.at[:, i].set(jnp.where(taken_R, j_R, t_R))
  return chosen_RxS


def _best_first(rewards_M, counts_R, offsets_R, s: int) -> jax.Array:
  """Per row, its first S - 1 positions ranked by reward, best first.

  Only rows with count < S are filled, so ranking S slots covers them; ties go
  to the earlier trajectory. Slots past the row's count rank last.
  """
  slot_S = jnp.arange(s, dtype=jnp.int32)
  own_RxS = slot_S[None, :] < counts_R[:, None]
  pos_RxS = jnp.clip(offsets_R[:, None] + slot_S, 0, rewards_M.shape[0] - 1)
  r_RxS = jnp.where(own_RxS, rewards_M[pos_RxS].astype(jnp.float32), -jnp.inf)
  return jnp.argsort(-r_RxS, axis=1, stable=True).astype(jnp.int32)


def align_sub_trajectories(
    key: jax.Array,
    counts_R: jax.Array,
    d_max: int,
    *,
    fill: str = "random",
    rewards_M: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Chooses d_max sub-trajectory slots for every rollout.

  Args:
    key: a PRNG key (typed or raw uint32).
    counts_R: [R] int, number of sub-trajectories each rollout produced (>= 0).
    d_max: static number of slots S per rollout (>= 1).
    fill: "random" duplicates random trajectories of the same rollout to fill
      free slots; "best" duplicates the highest-reward ones (needs rewards_M).
    rewards_M: [M] float rewards of the flat sub-trajectories; required for
      fill="best", where M must be at least sum(counts_R) (M = 0 when no
      rollout made a call).

  Returns:
    index_RxS: [R, S] int32 flat positions to gather trajectories with.
    valid_RxS: [R, S] bool, False for the slots of rollouts with no
      sub-trajectory (their index is 0: mask them out of loss and statistics).
  """
  counts_R = checks.check_array(_FN, "counts_R", counts_R, ndim=1, kinds="i")
  s = checks.check_static_int(_FN, "d_max", d_max, minimum=1)
  checks.check_choice(_FN, "fill", fill, FILLS)
  if fill == "best":
    if rewards_M is None:
      checks.fail(_FN, "rewards_M", "a [M] float array when fill='best' (it "
                  "ranks the trajectories to duplicate)", None)
    rewards_M = checks.check_array(_FN, "rewards_M", rewards_M, ndim=1,
                                   kinds="f")
    if rewards_M.shape[0] == 0:  # No call anywhere: nothing to rank.
      rewards_M = jnp.zeros((1,), jnp.float32)
  elif rewards_M is not None:
    rewards_M = checks.check_array(_FN, "rewards_M", rewards_M, ndim=1,
                                   kinds="f")
  checks.check_values_in_range(_FN, "counts_R", counts_R, 0, None)
  if fill == "best":
    total = jnp.sum(counts_R, keepdims=True)
    checks.check_values_in_range(_FN, "sum(counts_R) (vs len(rewards_M))",
                                 total, 0, rewards_M.shape[0] + 1)

  counts_R = counts_R.astype(jnp.int32)
  offsets_R = jnp.cumsum(counts_R) - counts_R
  num_rows = counts_R.shape[0]
  u_subset, u_order, u_fill = jax.random.uniform(key, (3, num_rows, s))
  slot_S = jnp.arange(s, dtype=jnp.int32)

  # count >= S: a uniform subset, in uniformly random slot order.
  subset_RxS = _distinct_subsets(u_subset, counts_R, s)
  subset_RxS = jnp.take_along_axis(subset_RxS, jnp.argsort(u_order, axis=1),
                                   axis=1)
  # 0 < count < S: every original once, in order, then duplicates.
  if fill == "random":
    extra_RxS = _uniform_below(u_fill, jnp.maximum(counts_R, 1)[:, None])
  else:
    rank_RxS = (slot_S[None, :] - counts_R[:, None]) % jnp.maximum(
        counts_R, 1)[:, None]
    extra_RxS = jnp.take_along_axis(
        _best_first(rewards_M, counts_R, offsets_R, s), rank_RxS, axis=1)
  filled_RxS = jnp.where(slot_S[None, :] < counts_R[:, None], slot_S,
                         extra_RxS)
  local_RxS = jnp.where((counts_R >= s)[:, None], subset_RxS, filled_RxS)
  valid_RxS = jnp.broadcast_to((counts_R > 0)[:, None], (num_rows, s))
  index_RxS = jnp.where(valid_RxS, offsets_R[:, None] + local_RxS, 0)
  return index_RxS.astype(jnp.int32), valid_RxS
