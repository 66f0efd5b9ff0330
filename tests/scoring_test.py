"""normalized_match follows GAIA's scorer rules; token_f1 follows SQuAD's."""

import pytest

from mgrpo_jax import normalized_match, token_f1


@pytest.mark.parametrize("prediction, gold, want", [
    # Numbers: compared as numbers after stripping $ % ,
    ("$1,234", "1234", True),
    ("1234.0", "1234", True),
    ("17%", "17", True),
    (" 42 ", "42", True),
    ("42 apples", "42", False),
    ("forty-two", "42", False),
    ("3.14159", "3.14", False),
    # Lists on , or ;: element-wise, same length, punctuation kept in strings
    ("apple, Banana ;cherry", "apple,banana;cherry", True),
    ("apple, banana", "apple, banana, cherry", False),
    ("1, 2.0, $3", "1, 2, 3", True),
    ("a.b, c", "ab, c", False),
    ("b, a", "a, b", False),
    # Strings: lowercase, no whitespace, no punctuation
    ("The Eiffel Tower.", "the eiffel tower", True),
    ("Saint-Petersburg", "saint petersburg", True),
    ("Paris", "London", False),
    ("", "", True),
    ("", "x", False),
])
def test_normalized_match(prediction, gold, want):
  assert normalized_match(prediction, gold) is want


def test_normalized_match_rejects_non_strings():
  with pytest.raises(TypeError, match="'prediction' must be a str"):
    normalized_match(None, "x")
  with pytest.raises(TypeError, match="'gold' must be a str"):
    normalized_match("x", 3)


@pytest.mark.parametrize("prediction, gold, want", [
    ("the cat sat", "a cat sat", 1.0),
    ("cat", "cat sat", 2 * 1.0 * 0.5 / 1.5),
    ("dog", "cat", 0.0),
    ("", "", 1.0),
    ("", "cat", 0.0),
    ("cat cat", "cat", 2 * 0.5 * 1.0 / 1.5),
])
def test_token_f1(prediction, gold, want):
  assert token_f1(prediction, gold) == pytest.approx(want)
