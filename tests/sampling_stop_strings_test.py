"""Tests of stop-string truncation (sampling/stop_strings.py)."""

import numpy as np
import pytest

from mgrpo_jax.sampling import stop_strings

# One character per id: 0 -> "a", 1 -> "b", ...
_TEXT = lambda ids: "".join(chr(ord("a") + i) for i in ids)


def test_a_row_is_cut_right_after_the_token_completing_the_string():
  generated = [[0, 1, 2, 3, 4], [0, 0, 0], [2, 3, 2, 3]]
  logprobs = [[-0.1 * (i + 1) for i in range(len(g))] for g in generated]
  done = np.array([False, False, True])
  hit = stop_strings.truncate(generated, logprobs, [0, 0, 0], done,
                              ("cd", "zz"), _TEXT)
  assert hit.tolist() == [True, False, True]
  assert generated == [[0, 1, 2, 3], [0, 0, 0], [2, 3]]
  assert logprobs[0] == [-0.1, -0.2, -0.30000000000000004, -0.4]
  assert len(logprobs[2]) == 2
  assert done.tolist() == [True, False, True]


def test_only_tokens_after_before_are_checked():
  # Row 0's string was already there before index 3: not a new hit.
  generated, logprobs = [[2, 3, 0, 0]], [[0.0] * 4]
  done = np.zeros(1, bool)
  hit = stop_strings.truncate(generated, logprobs, [4], done, ("cd",), _TEXT)
  assert not hit.any() and not done.any() and generated == [[2, 3, 0, 0]]
  # A string completed by a new token counts even when it began earlier.
  hit = stop_strings.truncate([[0, 2, 3]], [[0.0] * 3], [2], done, ("cd",),
                              _TEXT)
  assert hit.tolist() == [True]


def test_nothing_to_check_without_strings_or_a_decoder():
  generated = [[2, 3]]
  for strings, decode in ((("cd",), None), ((), _TEXT)):
    done = np.zeros(1, bool)
    hit = stop_strings.truncate(generated, [[0.0, 0.0]], [0], done, strings,
                                decode)
    assert not hit.any() and not done.any()
  assert generated == [[2, 3]]


def test_text_decoder_takes_a_function_or_a_tokenizer():
  class Tokenizer:
    decode = staticmethod(_TEXT)

  assert stop_strings.text_decoder(_TEXT, ("x",)) is _TEXT
  assert stop_strings.text_decoder(Tokenizer(), ("x",))([0, 1]) == "ab"
  assert stop_strings.text_decoder(None, ()) is None  # no strings: not needed
  with pytest.raises(ValueError, match=r"stop_strings=\('x',\) needs a "
                     "decode_fn"):
    stop_strings.text_decoder(None, ("x",))
