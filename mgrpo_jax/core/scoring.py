"""Answer scorers: normalised exact match (GAIA's rules) and token F1.

These run on the host, on strings; they are pure and import nothing else.

Normalised match, as GAIA's official scorer decides it:
  * a gold answer that parses as a number: the prediction matches when it
    parses to the same number after removing "$", "%" and ",";
  * a gold answer containing "," or ";": both are split on those characters,
    must have the same number of elements, and each element pair matches
    (numbers as above; strings lowercased without whitespace, punctuation
    kept);
  * any other gold answer: both lowercased, whitespace and punctuation
    removed, then compared.
"""

from __future__ import annotations

import collections
import math
import re
import string

_LIST_SEPARATORS = re.compile(r"[,;]")
_WHITESPACE = re.compile(r"\s")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _parse_number(text: str) -> float | None:
  try:
    value = float(text)
  except ValueError:
    return None
  return value


def _number_of_prediction(text: str) -> float | None:
  for char in "$%,":
    text = text.replace(char, "")
  return _parse_number(text)


def _normalise_text(text: str, *, drop_punctuation: bool) -> str:
  text = _WHITESPACE.sub("", text).lower()
  return text.translate(_PUNCTUATION) if drop_punctuation else text


def _numbers_equal(prediction: str, gold: float) -> bool:
  value = _number_of_prediction(prediction)
  if value is None:
    return False
  if math.isnan(gold):
    return math.isnan(value)
  return value == gold


def normalized_match(prediction: str, gold: str) -> bool:
  """True when `prediction` matches `gold` under GAIA's normalisation rules."""
  if not isinstance(prediction, str):
    raise TypeError(f"normalized_match: argument 'prediction' must be a str; "
                    f"got {type(prediction).__name__}.")
  if not isinstance(gold, str):
    raise TypeError(f"normalized_match: argument 'gold' must be a str; got "
                    f"{type(gold).__name__}.")
  gold_number = _parse_number(gold)
  if gold_number is not None:
    return _numbers_equal(prediction, gold_number)
  if _LIST_SEPARATORS.search(gold):
    gold_items = _LIST_SEPARATORS.split(gold)
    pred_items = _LIST_SEPARATORS.split(prediction)
    if len(gold_items) != len(pred_items):
      return False
    for pred_item, gold_item in zip(pred_items, gold_items):
      item_number = _parse_number(gold_item)
      if item_number is not None:
        if not _numbers_equal(pred_item, item_number):
          return False
      elif (_normalise_text(pred_item, drop_punctuation=False)
            != _normalise_text(gold_item, drop_punctuation=False)):
        return False
    return True
  return (_normalise_text(prediction, drop_punctuation=True)
          == _normalise_text(gold, drop_punctuation=True))


def _f1_tokens(text: str) -> list[str]:
  text = text.lower().translate(_PUNCTUATION)
  return _ARTICLES.sub(" ", text).split()


def token_f1(prediction: str, gold: str) -> float:
  """Bag-of-words F1 in [0, 1] (SQuAD/HotpotQA normalisation: lowercase, no
  punctuation, no articles). Two empty answers score 1, one empty scores 0."""
  pred, ref = _f1_tokens(prediction), _f1_tokens(gold)
  if not pred or not ref:
    return float(pred == ref)
  common = sum((collections.Counter(pred) & collections.Counter(ref)).values())
  if common == 0:
    return 0.0
  precision, recall = common / len(pred), common / len(ref)
  return 2 * precision * recall / (precision + recall)
