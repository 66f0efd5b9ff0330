"""Checks of config fields, with errors that name the field and the fix.

Each helper reads a dotted path ("align.d_max") from an ml_collections
ConfigDict and raises ConfigError("config.align.d_max=0: expected ...") when
the value is unusable, before any compute starts.
"""

from __future__ import annotations

from typing import Any, Iterable

import ml_collections


class ConfigError(ValueError):
  """A config field has an unusable value (the message names the field)."""


def get(config: ml_collections.ConfigDict, path: str) -> Any:
  node: Any = config
  for part in path.split("."):
    if part not in node:
      raise ConfigError(f"config.{path} is missing: the config file must "
                       f"define it (see configs/default.py).")
    node = node[part]
  return node


def fail(path: str, value: Any, expected: str) -> None:
  raise ConfigError(f"config.{path}={value!r}: expected {expected}.")


def integer(config, path: str, *, minimum: int,
            maximum: int | None = None) -> int:
  value = get(config, path)
  if isinstance(value, bool) or not isinstance(value, int):
    fail(path, value, "an integer")
  if value < minimum or (maximum is not None and value > maximum):
    fail(path, value, f"an integer in [{minimum}, {maximum}]"
         if maximum is not None else f"an integer >= {minimum}")
  return value


def number(config, path: str, *, minimum: float,
           maximum: float | None = None, open_min: bool = False) -> float:
  value = get(config, path)
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    fail(path, value, "a number")
  low_ok = value > minimum if open_min else value >= minimum
  if not low_ok or (maximum is not None and value > maximum):
    low = f"({minimum}" if open_min else f"[{minimum}"
    high = f"{maximum}]" if maximum is not None else "inf)"
    fail(path, value, f"a number in {low}, {high}")
  return float(value)


def choice(config, path: str, choices: Iterable[str]) -> str:
  value = get(config, path)
  choices = sorted(choices)
  if value not in choices:
    fail(path, value, f"one of {choices}")
  return value


def boolean(config, path: str) -> bool:
  value = get(config, path)
  if not isinstance(value, bool):
    fail(path, value, "True or False")
  return value
