"""Stop strings: cutting generated rows where their text gains one (host side).

Stop ids end a row inside the jitted decode; stop strings need the text, so
the engine checks them between decode chunks.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np


def text_decoder(decode_fn: Any, stop_strings: Sequence[str]
                 ) -> Callable[[list[int]], str] | None:
  """The `ids -> text` function stop strings are checked with: `decode_fn`
  itself, or its `.decode` (a tokenizer); None without stop strings."""
  if not stop_strings:
    return None
  if decode_fn is None:
    raise ValueError(f"SamplingParams.stop_strings={stop_strings!r} "
                     "needs a decode_fn (or tokenizer) on the Engine or the "
                     "call.")
  return decode_fn.decode if hasattr(decode_fn, "decode") else decode_fn


def truncate(generated: list[list[int]], logprobs: list[list[float]],
             before: Sequence[int], done: np.ndarray,
             stop_strings: Sequence[str],
             decode_text: Callable[[list[int]], str] | None) -> np.ndarray:
  """Truncates rows whose text gained a stop string; marks them done.

  Only rows that produced tokens after index `before[i]` are checked; a hit
  keeps tokens (and their log-probs) up to the one completing the string.
  Returns bool [len(generated)]: rows stopped by a string now.
  """
  hit = np.zeros(len(generated), bool)
  if decode_text is None or not stop_strings:
    return hit
  has_stop = lambda ids: any(s in decode_text(ids) for s in stop_strings)
  for i, g in enumerate(generated):
    if len(g) <= before[i] or not has_stop(g):
      continue
    for n in range(before[i] + 1, len(g) + 1):
      if has_stop(g[:n]):
        del g[n:], logprobs[i][n:]
        break
    hit[i] = True
    done[i] = True
  return hit
