"""The shapes an engine's jitted steps run on: open ladders or a closed set.

Every call of the engine's three jitted steps is one compiled program per
shape: decode (rows, window, shared prefix), prefill (rows, tokens,
window) and the cache copy (rows, window). `Shapes` decides each call's
padded sizes, in one of two modes:

* open (`runtime.shapes="open"`, and an engine built without shapes):
  decode rows on the x1.5 ladder, prefill rows, prompt tokens and windows
  on powers of two, the shared prefix any multiple of 32 slots. Few
  padded slots, but the set of programs is open-ended: a new question
  length can compile a new program mid-run.
* closed (a training run's default): every size from a short list derived
  from the engine's settings (`Shapes.closed`), so `programs()` lists
  every program a run can meet and the engine compiles them at start-up
  (`Engine.precompile`): decode rows are powers of two from `row_floor`
  (a decode step reads every weight whatever its rows, so a few padded
  rows cost little), decode
  windows the `decode_windows` largest powers of two up to the cache
  length, the shared prefix a quarter or a half of the window, prefill
  calls at most `prefill_chunk` tokens a row (a longer prompt is prefilled
  in several calls), on `prefill_windows` windows.

Shape letters as in `sampling.generation`.
"""

from __future__ import annotations

import dataclasses
import itertools

from mgrpo_jax.runtime.buckets import bucket, power_of_two

# An open-mode shared prefix is a multiple of this many slots (XLA's CPU
# reductions over 336 slots ran 15% slower than over 320 or 352: SmolLM2,
# batch 32, AMD EPYC Zen 5).
CASCADE_SLOTS = 32


def _ladder(low: int, high: int) -> list[int]:
  """low x 2^k below high, then high itself."""
  out = []
  size = max(int(low), 1)
  while size < high:
    out.append(size)
    size *= 2
  return out + [high]


def _smallest(allowed: tuple[int, ...], n: int) -> int:
  """The smallest allowed size >= n, or the largest allowed one."""
  for size in allowed:
    if size >= n:
      return size
  return allowed[-1]


@dataclasses.dataclass(frozen=True)
class Shapes:
  """Padded sizes of an engine's calls (see the module docstring)."""
  max_rows: int  # R: the engine's cache rows.
  cache_len: int  # S: the engine's cache slots per row.
  min_window: int = 64  # Smallest window (open) / ladder start (closed).
  min_prompt: int = 16  # Smallest padded prefill length.
  closed: bool = False
  # Closed mode only:
  row_floor: int = 1  # Fewest decode rows a call pads to.
  decode_window_count: int = 4  # Decode windows: the largest powers of two.
  prefill_window_count: int = 2  # Prefill and copy windows, likewise.
  prefill_chunk: int = 256  # Most tokens one prefill call takes per row.

  def __post_init__(self):
    for name in ("max_rows", "cache_len", "min_window", "min_prompt",
                 "row_floor", "decode_window_count", "prefill_window_count",
                 "prefill_chunk"):
      value = getattr(self, name)
      if not isinstance(value, int) or value < 1:
        raise ValueError(f"Shapes {name}={value!r}: expected a positive "
                         "integer.")
    if self.closed and self.prefill_chunk < self.min_prompt:
      raise ValueError(f"Shapes prefill_chunk={self.prefill_chunk}: expected "
                       f"at least min_prompt={self.min_prompt}.")

  @classmethod
  def of_engine(cls, shapes: "Shapes | None", max_rows: int, cache_len: int,
                min_window: int, min_prompt: int) -> "Shapes":
    """An engine's shapes: `shapes` if they are for its settings, the open
    ladders if None."""
    if shapes is None:
      return cls(max_rows, cache_len, min_window, min_prompt)
    mine = (max_rows, cache_len, min_window, min_prompt)
    theirs = (shapes.max_rows, shapes.cache_len, shapes.min_window,
              shapes.min_prompt)
    if mine != theirs:
      raise ValueError(
          f"Engine shapes: (max_rows, cache_len, min_window, min_prompt) "
          f"{theirs}; expected the engine's {mine}.")
    return shapes

  # ------------------------------------------------------------- the lists

  @property
  def windows(self) -> tuple[int, ...]:
    """Every window on the power-of-two ladder up to the cache length."""
    return tuple(_ladder(self.min_window, self.cache_len))

  @property
  def decode_windows(self) -> tuple[int, ...]:
    return (self.windows[-self.decode_window_count:] if self.closed
            else self.windows)

  @property
  def prefill_windows(self) -> tuple[int, ...]:
    return (self.windows[-self.prefill_window_count:] if self.closed
            else self.windows)

  @property
  def decode_row_sizes(self) -> tuple[int, ...]:
    if self.closed:
      return tuple(_ladder(min(self.row_floor, self.max_rows), self.max_rows))
    return tuple(sorted({bucket(n, 1, self.max_rows)
                         for n in range(1, self.max_rows + 1)}))

  @property
  def call_row_sizes(self) -> tuple[int, ...]:
    """Rows of prefill and copy calls."""
    return tuple(_ladder(1, self.max_rows))

  @property
  def prompt_sizes(self) -> tuple[int, ...]:
    """Padded prefill lengths (open: up to the cache length)."""
    top = self.prefill_chunk if self.closed else self.cache_len
    return tuple(_ladder(self.min_prompt,
                         power_of_two(top, self.min_prompt)))

  def prefixes(self, window: int) -> tuple[int, ...]:
    """Shared-prefix lengths a decode call on `window` may read once."""
    if self.closed:
      return tuple(p for p in (0, window // 4, window // 2)
                   if p == 0 or p >= CASCADE_SLOTS)
    return tuple(range(0, window, CASCADE_SLOTS))

  # ------------------------------------------------------------ one call

  def decode_rows(self, n: int) -> int:
    return _smallest(self.decode_row_sizes, n)

  def call_rows(self, n: int) -> int:
    return power_of_two(n, 1, self.max_rows)

  def decode_window(self, live_end: int) -> int:
    return _smallest(self.decode_windows, live_end)

  def prefill_window(self, live_end: int) -> int:
    return _smallest(self.prefill_windows, live_end)

  def prompt_tokens(self, t: int) -> int:
    """Padded length of a prefill call whose longest row has t tokens."""
    return (_smallest(self.prompt_sizes, t) if self.closed
            else power_of_two(t, self.min_prompt))

  @property
  def chunk(self) -> int | None:
    """Most tokens a row prefills in one call (None: no limit)."""
    return self.prefill_chunk if self.closed else None

  def prefix(self, common: int, window: int) -> int:
    """The shared prefix a decode call on `window` reads once, for rows
    that share their first `common` cached tokens: the longest allowed one
    within them (0: none)."""
    return max(p for p in self.prefixes(window) if p <= common)

  # ---------------------------------------------------------- every program

  def programs(self) -> dict[str, list[tuple[int, ...]]]:
    """Every program a closed set allows: decode (rows, window, prefix),
    prefill (rows, tokens, window), copy (rows, window)."""
    decode = [(b, w, p) for b, w in itertools.product(
        self.decode_row_sizes, self.decode_windows) for p in self.prefixes(w)
              if b > 1 or p == 0]
    prefill = [(b, t, w) for b, t, w in itertools.product(
        self.call_row_sizes, self.prompt_sizes, self.prefill_windows)
               if t <= w]
    copy = list(itertools.product(self.call_row_sizes, self.prefill_windows))
    return {"decode": decode, "prefill": prefill, "copy": copy}

  def count(self) -> int:
    """How many programs `programs()` lists."""
    return sum(map(len, self.programs().values()))
