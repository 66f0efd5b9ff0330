"""Named choices that configs select by string.

A `Registry` maps a name to a function or value. The core registers its
advantage scales, loss aggregations and reward presets here; a user adds their
own with `@ADVANTAGE_SCALES.register("my_scale")` and then selects it with
`config.advantage.scale = "my_scale"`, with no change to the core.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, TypeVar

T = TypeVar("T")


class Registry:
  """A name -> entry table with errors that list the known names."""

  def __init__(self, kind: str):
    self._kind = kind
    self._entries: dict[str, Any] = {}

  def register(self, name: str) -> Callable[[T], T]:
    """Decorator registering an entry under `name` (names are unique)."""
    if not isinstance(name, str) or not name:
      raise ValueError(f"{self._kind} registry: a name must be a non-empty "
                       f"string; got {name!r}.")

    def add(entry: T) -> T:
      if name in self._entries:
        raise ValueError(f"{self._kind} registry: '{name}' is already "
                         "registered; pick another name.")
      self._entries[name] = entry
      return entry

    return add

  def get(self, name: str, *, arg: str = "name") -> Any:
    """Returns the entry for `name`; `arg` names the caller's argument."""
    if name not in self._entries:
      raise ValueError(f"unknown {self._kind} {arg}={name!r}: expected one of "
                       f"{sorted(self._entries)}.")
    return self._entries[name]

  def names(self) -> list[str]:
    return sorted(self._entries)

  def __contains__(self, name: object) -> bool:
    return name in self._entries

  def __iter__(self) -> Iterator[str]:
    return iter(self.names())


# Advantage scales: fn(dev_N, group_std_N, batch_std, eps) -> adv_N, where
# dev_N = reward - group mean. Filled by core/advantages.py.
ADVANTAGE_SCALES = Registry("advantage scale")

# Loss aggregations: fn(loss_BxT, mask_BxT, max_len=None, rows=None) ->
# (total, denominator); the loss is total / denominator. max_len: the
# configured longest sequence (None: T); rows: how many of the B rows are
# trajectories when all-zero-mask padding rows follow them (None: all B; an
# int or a traced scalar). Filled by core/losses.py.
LOSS_AGGREGATIONS = Registry("loss aggregation")

# Reward weight presets (dicts of main_reward / sub_reward keyword arguments).
# Filled by core/rewards.py.
REWARD_PRESETS = Registry("reward preset")
