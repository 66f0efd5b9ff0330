"""How to pick tokens and when to stop: one `SamplingParams` per call."""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """Sampling and stopping settings of one generation call.

  temperature == 0 selects greedy decoding (argmax); any temperature > 0
  samples from softmax(logits / temperature), whether or not top-k / top-p are
  set. The restrictions compose: top-k first, then the nucleus of what is
  left.
  """

  temperature: float = 1.0  # 0 = greedy; > 0 divides the logits before softmax.
  top_k: int = 0  # Keep only the k most likely tokens; 0 = no limit.
  top_p: float = 1.0  # Nucleus sampling (Holtzman et al. 2020); 1 = no limit.
  max_new_tokens: int = 128  # Most tokens generated per row in this call.
  # Ids (e.g. EOS) that end a row; the stop token is kept in the output.
  stop_token_ids: tuple[int, ...] = ()
  # Texts (e.g. "</tool_call>") that end a row, checked on the host between
  # decode chunks; the output ends with the token completing the text.
  stop_strings: tuple[str, ...] = ()

  def __post_init__(self):
    t = self.temperature
    if not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
      raise ValueError(f"SamplingParams.temperature={t!r}: expected a finite "
                       "number >= 0 (0 means greedy).")
    if not isinstance(self.top_k, int) or self.top_k < 0:
      raise ValueError(f"SamplingParams.top_k={self.top_k!r}: expected an "
                       "integer >= 0 (0 means no top-k limit).")
    p = self.top_p
    if not isinstance(p, (int, float)) or not 0 < p <= 1:
      raise ValueError(f"SamplingParams.top_p={p!r}: expected a number in "
                       "(0, 1] (1 means no nucleus limit).")
    if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
      raise ValueError(f"SamplingParams.max_new_tokens={self.max_new_tokens!r}"
                       ": expected a positive integer.")
    ids = tuple(self.stop_token_ids)
    if any(not isinstance(i, int) or i < 0 for i in ids):
      raise ValueError(f"SamplingParams.stop_token_ids={self.stop_token_ids!r}"
                       ": expected non-negative integer token ids.")
    strings = ((self.stop_strings,) if isinstance(self.stop_strings, str)
               else tuple(self.stop_strings))
    if any(not isinstance(s, str) or not s for s in strings):
      raise ValueError(f"SamplingParams.stop_strings={self.stop_strings!r}: "
                       "expected non-empty strings.")
    object.__setattr__(self, "stop_token_ids", ids)
    object.__setattr__(self, "stop_strings", strings)

  @property
  def greedy(self) -> bool:
    """True when tokens are chosen by argmax (temperature == 0)."""
    return self.temperature == 0
