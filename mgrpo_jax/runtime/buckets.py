"""Padded sizes: the shapes every jitted step is compiled for.

Batch rows, prompt and sequence lengths and cache windows are padded up to
a bucket so that a run compiles a bounded number of programs whatever its
data. Two ladders:

* `bucket`, minimum x (1, 1.5, 2, 3, 4, 6, 8, ...): at most two shapes per
  doubling and nothing padded past 1.5x its size (powers of two pad 513 to
  1024). The learners' padded lengths (train/packing.py).
* `power_of_two`: one shape per doubling. The engine's rows, prompt
  lengths, windows and stop ids, whose product is the shape of a call:
  with `bucket` for all three, batched rollouts took 28.9 s against 32.7 s
  (bench.rollouts, AMD EPYC, one run each), but a default run compiled 20
  new engine programs in steps 4 to 7 (the steps bench.step times)
  against 2 (about 0.9 s each for the tiny model, 18 s for SmolLM2); with
  the ladder on rows alone, or on lengths and windows alone, 32.0 and
  32.2 s.
"""

from __future__ import annotations


def bucket(n: int, minimum: int, maximum: int | None = None) -> int:
  """The smallest of minimum x (1, 1.5, 2, 3, 4, 6, ...) >= n (minimum at
  least 1), capped at `maximum` (None: no cap)."""
  size = max(int(minimum), 1)
  while size < n:
    half_step = size * 3 // 2
    size = half_step if half_step >= n and half_step > size else size * 2
  return size if maximum is None else min(size, maximum)


def power_of_two(n: int, minimum: int, maximum: int | None = None) -> int:
  """The smallest minimum x 2^k >= n (minimum at least 1), capped at
  `maximum` (None: no cap)."""
  size = max(int(minimum), 1)
  while size < n:
    size *= 2
  return size if maximum is None else min(size, maximum)
