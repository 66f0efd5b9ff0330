"""Planning one call's prefill (prefixes rows share, rows grouped into calls)
and the prefix its decode reads once for all rows.

Pure functions over token lists (host side); the engine runs the plan.
"""

from __future__ import annotations

from typing import NamedTuple

from mgrpo_jax.runtime.buckets import power_of_two


class SharePlan(NamedTuple):
  """How new conversations of one call share their prompts' prefill."""
  groups: list[list[int]]  # Rows with one prompt; each group's first row
                           # prefills it, every row samples after it.
  common: int  # Leading tokens every group's prompt starts with (0: none
               # worth sharing); prefilled once for all groups.


def share_plan(prompts: list[list[int]], min_common: int) -> SharePlan:
  """Groups equal prompts (each of 1+ tokens), and finds the prefix all
  groups share if it has at least `min_common` tokens. The common prefix
  stops short of the shortest prompt's end: each group's first row still
  has a token to prefill, after which its rows sample."""
  groups: dict[tuple[int, ...], list[int]] = {}
  for i, p in enumerate(prompts):
    groups.setdefault(tuple(p), []).append(i)
  heads = [list(key) for key in groups]
  common = (min(common_prefix(heads), min(map(len, heads)) - 1)
            if len(heads) > 1 else 0)
  return SharePlan(list(groups.values()),
                   common if common >= min_common else 0)


def common_prefix(seqs: list[list[int]]) -> int:
  """Length of the longest prefix every sequence starts with."""
  n = min(map(len, seqs))
  for i in range(n):
    if any(s[i] != seqs[0][i] for s in seqs[1:]):
      return i
  return n


def cascade_prefix(tokens: list[list[int]], cached: list[int],
                   multiple: int, last: int = 0) -> int:
  """Slots [0, P) a decode call of these rows reads once, from one row: the
  tokens every row starts with and holds in the cache, rounded down to a
  multiple of `multiple`; `last` (the P of an earlier call) instead when
  every row still holds it, so that a run meets few values of P (each a
  program). 0 (each row reads its own) for a single row or a shorter
  prefix."""
  if len(tokens) < 2:
    return 0
  common = min(common_prefix(tokens), *cached)
  if 0 < last <= common:
    return last
  return common // multiple * multiple


def plan_calls(lengths: list[int], min_bucket: int, max_rows: int,
               call_cost: int = 32) -> list[list[int]]:
  """Rows (indices into `lengths`) grouped into prefill calls.

  A call of n rows whose longest has t tokens costs power_of_two(n) x
  power_of_two(t) padded tokens plus `call_cost` (its fixed cost in tokens).
  Rows sorted longest first are cut into the runs of least total cost
  (exact, by dynamic programming): one long tool result no longer pads
  every short row of the batch to its length.
  """
  order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
  n = len(order)
  best = [0] + [None] * n  # best[j]: least cost of the first j rows.
  cut = [0] * (n + 1)
  for j in range(1, n + 1):
    for i in range(j):
      cost = (best[i] + call_cost + power_of_two(j - i, 1, max_rows)
              * power_of_two(lengths[order[i]], min_bucket))
      if best[j] is None or cost < best[j]:
        best[j], cut[j] = cost, i
  calls, j = [], n
  while j:
    calls.append(order[cut[j]:j])
    j = cut[j]
  return calls[::-1]
