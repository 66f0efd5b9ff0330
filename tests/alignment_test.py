"""align_sub_trajectories: properties over random counts, uniformity, errors."""

import collections
import itertools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax import align_sub_trajectories

R, MAX_COUNT = 12, 15  # rows per example and largest count drawn
M = R * MAX_COUNT      # flat rewards length for fill="best"

_align = jax.jit(align_sub_trajectories, static_argnames=("d_max", "fill"))


@st.composite
def counts_and_dmax(draw):
  d_max = draw(st.integers(1, 5))
  special = [0, 1, d_max - 1, d_max, d_max + 1, MAX_COUNT]
  value = st.one_of(st.sampled_from(special), st.integers(0, MAX_COUNT))
  counts = np.array(draw(st.lists(value, min_size=R, max_size=R)), np.int32)
  seed = draw(st.integers(0, 2**31 - 1))
  return counts, d_max, seed


def check_rows(counts, d_max, index, valid, rewards=None):
  """The documented per-row contract, written independently of the code."""
  offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
  assert index.shape == valid.shape == (len(counts), d_max)
  for c, o, idx, ok in zip(counts, offsets, index, valid):
    if c == 0:
      assert not ok.any() and (idx == 0).all()
      continue
    assert ok.all()
    assert ((idx >= o) & (idx < o + c)).all(), (c, o, idx)
    if c >= d_max:
      assert len(set(idx.tolist())) == d_max
    else:
      got = collections.Counter(idx.tolist())
      assert set(got) <= set(range(o, o + c))
      assert all(got[p] >= 1 for p in range(o, o + c))  # each original kept
      if rewards is not None:
        own = rewards[o:o + c]
        order = sorted(range(c), key=lambda i: (-own[i], i))
        extra = [o + order[i % c] for i in range(d_max - c)]
        want = collections.Counter(list(range(o, o + c)) + extra)
        assert got == want, (own, idx)


@given(case=counts_and_dmax())
def test_random_fill_contract(case):
  counts, d_max, seed = case
  index, valid = _align(jax.random.key(seed), counts, d_max=d_max)
  check_rows(counts, d_max, np.asarray(index), np.asarray(valid))


@given(case=counts_and_dmax(), data=st.data())
def test_best_fill_contract(case, data):
  counts, d_max, seed = case
  levels = data.draw(st.sampled_from([[0.0, 0.1, 1.0], [0.0, 0.5]]))
  rewards = np.array(data.draw(st.lists(st.sampled_from(levels), min_size=M,
                                        max_size=M)), np.float32)
  index, valid = _align(jax.random.key(seed), counts, d_max=d_max,
                        fill="best", rewards_M=rewards)
  check_rows(counts, d_max, np.asarray(index), np.asarray(valid), rewards)


def test_d_max_one():
  counts = np.array([0, 1, 2, 7], np.int32)
  index, valid = align_sub_trajectories(jax.random.key(3), counts, 1)
  check_rows(counts, 1, np.asarray(index), np.asarray(valid))


def test_same_key_same_result_and_keys_differ():
  counts = jnp.array([9, 9, 9, 9])
  a = align_sub_trajectories(jax.random.key(1), counts, 4)[0]
  b = align_sub_trajectories(jax.random.key(1), counts, 4)[0]
  c = align_sub_trajectories(jax.random.key(2), counts, 4)[0]
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)


def test_raw_uint32_keys_work():
  index, valid = align_sub_trajectories(jax.random.PRNGKey(0),
                                        jnp.array([3, 0]), 2)
  assert valid.tolist() == [[True, True], [False, False]]


def _draw_many(counts, d_max, n):
  keys = jax.random.split(jax.random.key(0), n)
  f = jax.jit(jax.vmap(lambda k: align_sub_trajectories(k, counts, d_max)[0]))
  return np.asarray(f(keys))


def test_subsets_are_uniform():
  # 5 trajectories, 2 slots: each of the 10 subsets has probability 1/10.
  n = 20000
  picks = _draw_many(jnp.array([5]), 2, n)[:, 0, :]
  freq = collections.Counter(tuple(sorted(p)) for p in picks.tolist())
  assert set(freq) == set(itertools.combinations(range(5), 2))
  # 5 binomial standard deviations: sqrt(n p (1-p)) = 42.
  for subset, k in freq.items():
    assert abs(k - n / 10) < 5 * 42, (subset, k)
  # Every trajectory lands in the first slot equally often too.
  first = collections.Counter(picks[:, 0].tolist())
  for k in first.values():
    assert abs(k - n / 5) < 5 * np.sqrt(n * 0.2 * 0.8)


def test_random_duplicates_are_uniform():
  n = 20000
  picks = _draw_many(jnp.array([3]), 4, n)[:, 0, :]
  assert (picks[:, :3] == np.arange(3)).all()  # originals first, in order
  freq = collections.Counter(picks[:, 3].tolist())
  for k in freq.values():
    assert abs(k - n / 3) < 5 * np.sqrt(n * (1 / 3) * (2 / 3))


def test_compiles_once_across_counts():
  traces = []

  @jax.jit
  def f(key, counts, rewards):
    traces.append(1)
    return align_sub_trajectories(key, counts, 4, fill="best",
                                  rewards_M=rewards)

  rng = np.random.default_rng(0)
  for i in range(6):
    counts = rng.integers(0, 8, size=10).astype(np.int32)
    f(jax.random.key(i), counts, rng.random(80).astype(np.float32))
  assert len(traces) == 1


ERRORS = [
    (dict(d_max=0), "'d_max' must be an int >= 1"),
    (dict(d_max=2.0), "'d_max' must be a Python int"),
    (dict(counts_R=np.ones((2, 2), np.int32)), "'counts_R' must be a 1-D"),
    (dict(counts_R=np.ones(3, np.float32)), "'counts_R' must be of integer"),
    (dict(counts_R=np.array([1, -1])), "'counts_R' must be in [0, inf)"),
    (dict(fill="worst"), "'fill' must be one of ['best', 'random']"),
    (dict(fill="best"), "'rewards_M' must be a [M] float array when fill='best'"),
    (dict(fill="best", rewards_M=np.ones(2, np.float32)),
     "'sum(counts_R) (vs len(rewards_M))' must be in [0, 3)"),
    (dict(fill="best", rewards_M=np.ones(4, np.int32)),
     "'rewards_M' must be of floating"),
]


@pytest.mark.parametrize("kwargs, message", ERRORS)
def test_bad_input_is_named(kwargs, message):
  args = dict(counts_R=np.array([1, 2], np.int32), d_max=2)
  args.update(kwargs)
  with pytest.raises(ValueError, match=re.escape(message)):
    align_sub_trajectories(jax.random.key(0), args.pop("counts_R"),
                           args.pop("d_max"), **args)


def test_negative_counts_fail_under_jit():
  with pytest.raises(Exception, match=re.escape("'counts_R' must be in [0, inf)")):
    _align(jax.random.key(0), jnp.array([2, -3]), d_max=2)[0].block_until_ready()
