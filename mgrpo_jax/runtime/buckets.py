"""Padded sizes: the shapes every jitted step is compiled for.

Batch rows, prompt and sequence lengths and cache windows are padded up to
a bucket so that a run compiles a bounded number of programs whatever its
data. Two ladders:

* `bucket`, minimum x (1, 1.5, 2, 3, 4, 6, 8, ...): at most two shapes per
  doubling and nothing padded past 1.5x its size (powers of two pad 513 to
  1024). The learners' padded lengths (train/packing.py) and the engine's
  decode rows: the rollouts of bench.rollouts decode 20 live rows in 24,
  not 32 (batched decode 7.7-8.2 s against 9.2-9.5 s, AMD EPYC Zen 5,
  alternating runs), for about 2 more programs in steps 4 to 7 of a
  default run (the steps bench.step times).
* `power_of_two`: one shape per doubling. The engine's prefill rows,
  prompt lengths, windows and stop ids, whose product is the shape of a
  call: with `bucket` for rows, lengths and windows, batched rollouts took
  28.9 s against 32.7 s (bench.rollouts, AMD EPYC with AVX2, one run each),
  but a default run compiled 20 new engine programs in steps 4 to 7
  against 2 (about 0.9 s each for the tiny model, 18 s for SmolLM2).
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
