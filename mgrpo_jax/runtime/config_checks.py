"""Checks of config fields, with errors that name the field and the fix.

Each helper reads a dotted path ("align.d_max") from an ml_collections
ConfigDict and raises ConfigError("config.align.d_max=0: expected ...") when
the value is unusable, before any compute starts.

`parse_flags` is the command line's side of the same promise: given to
`absl.app.run(main, flags_parser=parse_flags)`, it turns a missing config
file, a misspelt `--config.FIELD` or a bad flag value into one line on
stderr and exit code 2 (`usage_error`), instead of a traceback.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import os
import re
import sys
from typing import Any, Iterable, NoReturn, Sequence

from absl import flags
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
           maximum: float | None = None, open_min: bool = False,
           open_max: bool = False) -> float:
  """A finite number in [minimum, maximum]; `open_min` / `open_max` leave
  out that end (`maximum=None`: no upper bound)."""
  value = get(config, path)
  if (isinstance(value, bool) or not isinstance(value, (int, float))
      or not math.isfinite(value)):
    fail(path, value, "a finite number")
  low_ok = value > minimum if open_min else value >= minimum
  high_ok = maximum is None or (value < maximum if open_max
                                else value <= maximum)
  if not (low_ok and high_ok):
    low = f"({minimum}" if open_min else f"[{minimum}"
    high = ("inf)" if maximum is None
            else f"{maximum})" if open_max else f"{maximum}]")
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


def string(config, path: str, *, empty: bool = True) -> str:
  value = get(config, path)
  if not isinstance(value, str) or (not empty and not value):
    fail(path, value, "a string" if empty else "a non-empty string")
  return value


# ------------------------------------------------------------ command line


def usage_error(message: str) -> NoReturn:
  """Ends the program on a bad command line or config: one line, exit 2."""
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def load_config_file(path: str) -> ml_collections.ConfigDict:
  """`get_config()` of a config file as --config reads it: "FILE.py", or
  "FILE.py:ARG" for `get_config(ARG)`."""
  file, *args = str(path).split(":", 1)
  if not os.path.isfile(file):
    raise ConfigError(f"config file {file!r} does not exist.")
  spec = importlib.util.spec_from_file_location("_mgrpo_config", file)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(*args)


def _flag_value(argv: Sequence[str], name: str) -> str | None:
  """The value of `--name VALUE` or `--name=VALUE` in argv (None: absent)."""
  for i, arg in enumerate(argv):
    flag, sep, value = arg.partition("=")
    if flag in (f"-{name}", f"--{name}"):
      return value if sep else (argv[i + 1] if i + 1 < len(argv) else None)
  return None


def unknown_field(config: ml_collections.ConfigDict,
                  path: str) -> str | None:
  """Why `config.<path>` does not exist, with the closest existing field;
  None when it exists."""
  node, parts = config, path.split(".")
  for i, part in enumerate(parts):
    where = ".".join(["config", *parts[:i]])
    if not isinstance(node, ml_collections.ConfigDict):
      return f"{where} is a value, not a section: it has no field {part!r}."
    if part not in node:
      known = sorted(node.keys())
      close = difflib.get_close_matches(part, known, n=1)
      hint = (f"did you mean {where}.{close[0]}?" if close
              else f"its fields are {known}.")
      return f"unknown config field {where}.{part}: {hint}"
    node = node[part]
  return None


def parse_flags(argv: list[str], name: str = "config") -> list[str]:
  """absl flags parser (`app.run(main, flags_parser=parse_flags)`) whose
  errors are one line and exit code 2: a config file that does not exist,
  an override of a field the config lacks, a flag value that does not
  parse."""
  path = _flag_value(argv[1:], name)
  if path is not None and not os.path.isfile(path.split(":", 1)[0]):
    usage_error(f"--{name}={path}: no such config file.")
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    usage_error(str(e))
  except (AttributeError, KeyError):  # ml_collections: an unknown field.
    if path is None:
      raise
    config = load_config_file(path)
    for arg in argv[1:]:
      match = re.match(rf"--?(?:no)?{name}\.([^=]+)", arg)
      message = match and unknown_field(config, match.group(1))
      if message:
        usage_error(message)
    raise
