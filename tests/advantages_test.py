"""group_relative_advantages against a plain NumPy reference."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax import ADVANTAGE_SCALES, group_relative_advantages


def reference(rewards, group_ids, num_groups, valid, scale, eps):
  """Loop-over-groups NumPy reference of the documented contract."""
  rewards = np.asarray(rewards, np.float64)
  adv = np.zeros_like(rewards)
  valid = np.asarray(valid, bool)
  all_valid = rewards[valid]
  batch_std = all_valid.std(ddof=1) if all_valid.size >= 2 else 0.0
  for g in range(num_groups):
    members = np.flatnonzero((group_ids == g) & valid)
    if members.size < 2:
      continue
    r = rewards[members]
    if r.max() == r.min():
      continue
    dev = r - r.mean()
    if scale == "group":
      adv[members] = dev / (r.std(ddof=1) + eps)
    elif scale == "batch":
      adv[members] = dev / (batch_std + eps)
    else:
      adv[members] = dev
  return adv


MAX_N, MAX_GROUPS = 40, 6


@st.composite
def grouped_rewards(draw):
  """Padded to MAX_N samples (padding is invalid), so one compilation serves
  every example."""
  num_groups = MAX_GROUPS
  n = MAX_N
  group_ids = np.array(draw(st.lists(st.integers(0, num_groups - 1),
                                     min_size=n, max_size=n)))
  # Few distinct values, so ties and zero-spread groups are common.
  values = draw(st.sampled_from([[0.0, 0.1, 1.0], [0.0, 1.0],
                                 [-2.5, 0.3, 0.7, 4.0]]))
  rewards = np.array(draw(st.lists(st.sampled_from(values), min_size=n,
                                   max_size=n)), np.float32)
  valid = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
  used = draw(st.integers(1, n))
  valid[used:] = False
  return rewards, group_ids, num_groups, valid


_jitted = jax.jit(group_relative_advantages,
                  static_argnames=("num_groups", "scale", "eps"))


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@given(case=grouped_rewards())
def test_matches_reference(scale, case):
  rewards, group_ids, num_groups, valid = case
  got = _jitted(rewards, group_ids, num_groups=num_groups, valid_N=valid,
                scale=scale, eps=1e-6)
  want = reference(rewards, group_ids, num_groups, valid, scale, 1e-6)
  assert got.dtype == jnp.float32
  assert np.all(np.isfinite(got))
  np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_grpo_example_by_hand():
  # Group 0: rewards 0, 1, 1 -> mean 2/3, unbiased std sqrt(1/3).
  rewards = jnp.array([0.0, 1.0, 1.0, 0.1, 0.1, 0.1])
  adv = group_relative_advantages(rewards, jnp.array([0, 0, 0, 1, 1, 1]), 2,
                                  eps=0.0)
  s = np.sqrt(1 / 3)
  np.testing.assert_allclose(adv, [-2 / 3 / s, 1 / 3 / s, 1 / 3 / s, 0, 0, 0],
                             rtol=1e-6)


def test_degenerate_groups_give_zero_not_nan():
  rewards = jnp.array([0.3, 0.3, 0.7, 5.0, 1.0])
  group_ids = jnp.array([0, 0, 1, 2, 2])
  valid = jnp.array([True, True, True, True, False])
  for scale in ("group", "batch", "none"):
    adv = group_relative_advantages(rewards, group_ids, 3, valid_N=valid,
                                    scale=scale, eps=0.0)
    np.testing.assert_array_equal(adv, np.zeros(5))


def test_all_invalid_batch():
  adv = group_relative_advantages(jnp.ones(4), jnp.zeros(4, jnp.int32), 1,
                                  valid_N=jnp.zeros(4, bool))
  np.testing.assert_array_equal(adv, np.zeros(4))


def test_bf16_rewards_and_jit():
  rewards = jnp.array([0.0, 1.0, 0.1, 1.0], jnp.bfloat16)
  fn = jax.jit(group_relative_advantages, static_argnums=2,
               static_argnames=("scale",))
  got = fn(rewards, jnp.array([0, 0, 1, 1]), 2, scale="group")
  want = reference(np.asarray(rewards, np.float32), np.array([0, 0, 1, 1]), 2,
                   np.ones(4, bool), "group", 1e-6)
  assert got.dtype == jnp.float32
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_compiles_once_for_new_values():
  traces = []

  @jax.jit
  def f(rewards, group_ids, valid):
    traces.append(1)
    return group_relative_advantages(rewards, group_ids, 4, valid_N=valid)

  rng = np.random.default_rng(0)
  for _ in range(5):
    f(rng.random(16).astype(np.float32), rng.integers(0, 4, 16),
      rng.random(16) > 0.3)
  assert len(traces) == 1


def test_user_registered_scale_is_selectable():
  name = "test_times_two"
  if name not in ADVANTAGE_SCALES:
    ADVANTAGE_SCALES.register(name)(lambda dev, gstd, bstd, eps: 2.0 * dev)
  adv = group_relative_advantages(jnp.array([0.0, 1.0]), jnp.array([0, 0]), 1,
                                  scale=name)
  np.testing.assert_allclose(adv, [-1.0, 1.0])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rewards_N=np.ones((2, 2), np.float32)), "'rewards_N' must be a 1-D"),
        (dict(rewards_N=np.ones(4, np.int32)), "'rewards_N' must be of floating"),
        (dict(group_ids_N=np.zeros(4, np.float32)), "'group_ids_N' must be of integer"),
        (dict(group_ids_N=np.zeros(3, np.int32)), "'group_ids_N' must be of shape (4,)"),
        (dict(group_ids_N=np.array([0, 1, 2, 3])), "'group_ids_N' must be in [0, 2)"),
        (dict(group_ids_N=np.array([0, -1, 0, 1])), "'group_ids_N' must be in [0, 2)"),
        (dict(num_groups=0), "'num_groups' must be an int >= 1"),
        (dict(num_groups=2.0), "'num_groups' must be a Python int"),
        (dict(valid_N=np.ones(5, bool)), "'valid_N' must be of shape (4,)"),
        (dict(scale="grop"), "unknown advantage scale scale='grop'"),
        (dict(eps=-1.0), "'eps' must be a finite number >= 0"),
    ],
)
def test_bad_input_is_named(kwargs, message):
  args = dict(rewards_N=np.ones(4, np.float32),
              group_ids_N=np.array([0, 0, 1, 1]), num_groups=2)
  args.update(kwargs)
  rewards, ids, groups = (args.pop("rewards_N"), args.pop("group_ids_N"),
                          args.pop("num_groups"))
  with pytest.raises(ValueError, match=__import__("re").escape(message)):
    group_relative_advantages(rewards, ids, groups, **args)


def test_out_of_range_ids_fail_under_jit_too():
  f = jax.jit(group_relative_advantages, static_argnums=2)
  with pytest.raises(Exception, match=r"'group_ids_N' must be in \[0, 2\)"):
    f(jnp.ones(3), jnp.array([0, 1, 2]), 2).block_until_ready()


class JitAndEagerTest(chex.TestCase):
  """The same advantages with and without jax.jit (chex.variants)."""

  @chex.variants(with_jit=True, without_jit=True)
  def test_advantages_equal_the_reference_jitted_or_not(self):
    rewards = np.array([1.0, 0.0, 0.5, 0.2, 0.9, 0.9], np.float32)
    groups = np.array([0, 0, 0, 1, 1, 1], np.int32)
    valid = np.ones(6, bool)
    fn = self.variant(lambda r, g, v: group_relative_advantages(
        r, g, num_groups=2, valid_N=v, scale="group", eps=1e-6))
    got = fn(rewards, groups, valid)
    chex.assert_shape(got, (6,))
    chex.assert_tree_all_finite(got)
    np.testing.assert_allclose(
        np.asarray(got), reference(rewards, groups, 2, valid, "group", 1e-6),
        rtol=1e-5, atol=1e-6)
