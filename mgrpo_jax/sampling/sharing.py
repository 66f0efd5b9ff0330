"""What new conversations of one engine call share, prefilled once.

The engine's conversations (`Conversation`: a cache row, its tokens, how
many are cached) and `share_prefixes`, which runs `prefill.share_plan`
through the engine's prefill and cache-copy calls.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from mgrpo_jax.sampling import prefill


@dataclasses.dataclass
class Conversation:
  """One live conversation of an engine."""
  row: int  # Row of the engine's cache.
  tokens: list[int]  # Every token of the conversation so far.
  cached: int  # Positions [0, cached) hold this conversation's keys/values.


def share_prefixes(convs: list[Conversation], min_common: int,
                   prefill_fn: Callable[..., tuple[np.ndarray, np.ndarray]],
                   copy_fn: Callable[..., None], sampling: Any, key: Any,
                   first: np.ndarray, first_lp: np.ndarray) -> None:
  """Prefills once what new conversations of one call share, and copies it.

  Two levels: the prefix common to every distinct new prompt (a system
  prompt, at least `min_common` tokens), then each prompt that several
  rows hold (a group of rollouts of one question): its first row prefills
  it whole, every row of the group samples its first token after it (into
  `first` / `first_lp`, drawing with its index in `convs`, as it would
  alone), and the others get a copy of its keys and values. Those are the
  ones the rows would compute themselves, up to float32 rounding of
  another batch shape. `prefill_fn` and `copy_fn` are the engine's
  `_prefill(convs, pending, sampling, key, draws, sources=None)` and
  `_copy(sources, targets, slots)`.
  """
  fresh = [i for i, c in enumerate(convs) if c.cached == 0]
  plan = prefill.share_plan([convs[i].tokens for i in fresh], min_common)
  heads = [convs[fresh[g[0]]] for g in plan.groups]
  if plan.common:
    prefill_fn([heads[0]], [heads[0].tokens[:plan.common]], sampling, key,
               [0])
    copy_fn([heads[0]] * (len(heads) - 1), heads[1:], plan.common)
    for h in heads[1:]:
      h.cached = plan.common
  shared = [[fresh[j] for j in g] for g in plan.groups if len(g) > 1]
  if not shared:
    return
  leads = [convs[g[0]] for g in shared]
  rows = [i for g in shared for i in g]
  first[rows], first_lp[rows] = prefill_fn(
      leads, [c.tokens[c.cached:] for c in leads], sampling, key, rows,
      [j for j, g in enumerate(shared) for _ in g])
  copy_fn([convs[g[0]] for g in shared for _ in g[1:]],
          [convs[i] for g in shared for i in g[1:]],
          max(len(c.tokens) for c in leads))
  for g in shared:
    for i in g[1:]:
      convs[i].cached = convs[g[0]].cached
