"""Tests of the prefill planning: shared prompt prefixes and call groups."""

import itertools

import numpy as np
import pytest

from mgrpo_jax.runtime.buckets import power_of_two
from mgrpo_jax.sampling.prefill import (cascade_prefix, common_prefix,
                                        plan_calls, share_plan)


def _cost(calls, lengths, min_bucket, max_rows, call_cost=32):
  return sum(call_cost + power_of_two(len(c), 1, max_rows)
             * power_of_two(max(lengths[i] for i in c), min_bucket)
             for c in calls)


def test_share_plan_groups_equal_prompts_and_finds_the_common_prefix():
  system = list(range(100, 120))  # 20 tokens every prompt starts with.
  q1, q2 = system + [1, 2, 3], system + [4, 5]
  prompts = [q1 + [7], q2 + [8], q1 + [9], q1 + [7], [50, 51]]
  plan = share_plan(prompts, min_common=16)
  # Equal prompts: one group (its first row prefills it); a different last
  # token is another prompt.
  assert plan.groups == [[0, 3], [1], [2], [4]]
  assert plan.common == 0  # [50, 51] shares nothing with the others.
  plan = share_plan(prompts[:4], min_common=16)
  assert plan.common == 20
  assert share_plan(prompts[:4], min_common=21).common == 0
  assert share_plan([q1 + [7], q1 + [9]], min_common=1).common == 23
  assert share_plan([q1, q1], min_common=1) == ([[0, 1]], 0)  # one group
  # The common prefix leaves every group a token to prefill.
  assert share_plan([system, system + [1]], min_common=1).common == 19


def test_cascade_prefix_is_the_cached_common_prefix_in_whole_multiples():
  system = list(range(100, 170))  # 70 tokens every row starts with.
  rows = [system + [1, 2], system + [3], system + [4, 5, 6]]
  assert cascade_prefix(rows, [72, 71, 73], multiple=32) == 64
  assert cascade_prefix(rows, [72, 40, 73], multiple=32) == 32  # cached
  assert cascade_prefix(rows, [72, 71, 73], multiple=16) == 64
  assert cascade_prefix(rows, [72, 71, 73], multiple=128) == 0
  assert cascade_prefix(rows[:1], [72], multiple=32) == 0  # one row
  assert cascade_prefix([system, [9] + system], [70, 71], multiple=1) == 0
  # An earlier call's P is kept while every row holds it, else recomputed.
  assert cascade_prefix(rows, [72, 71, 73], multiple=32, last=32) == 32
  assert cascade_prefix(rows, [72, 71, 73], multiple=32, last=96) == 64
  assert cascade_prefix(rows, [72, 71, 73], multiple=32, last=70) == 70


def test_common_prefix():
  assert common_prefix([[1, 2, 3], [1, 2], [1, 2, 4]]) == 2
  assert common_prefix([[1], [2]]) == 0
  assert common_prefix([[1, 2], [1, 2]]) == 2


def test_plan_calls_covers_every_row_once_and_cuts_padding():
  lengths = [220, 20, 30, 18, 25, 200, 17, 19, 22, 21, 24, 26, 23, 20, 20, 31]
  calls = plan_calls(lengths, 16, 32)
  assert sorted(itertools.chain(*calls)) == list(range(len(lengths)))
  # Two long rows no longer pad fourteen short ones to 256 tokens.
  assert sorted(map(sorted, calls)) == [[0, 5], sorted(set(range(16)) - {0, 5})]
  assert _cost(calls, lengths, 16, 32) < _cost([list(range(16))], lengths, 16,
                                               32) / 3


@pytest.mark.parametrize("seed", range(20))
def test_plan_calls_is_optimal_over_contiguous_cuts(seed):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, 300, int(rng.integers(1, 9))).tolist()
  calls = plan_calls(lengths, 16, 8)
  order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
  best = min(
      _cost([order[a:b] for a, b in zip((0,) + cuts, cuts + (len(order),))],
            lengths, 16, 8)
      for r in range(len(order))
      for cuts in itertools.combinations(range(1, len(order)), r))
  assert _cost(calls, lengths, 16, 8) == best
