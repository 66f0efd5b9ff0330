"""The records of a data file, each a `Record` that checks its own fields.

  json_records(path)       JSON Lines, a JSON list, or an object wrapping one
  first_json_record(path)  the first of those records (format detection)
  csv_records(path, cols)  the rows of a CSV file with a header
  csv_header(path)         a CSV file's column names

A JSON file's layout is told by its first non-blank character, not by its
name: "[" opens a list of records; "{" opens JSON Lines (one object per
line) or, when the whole file is one object, an object holding the list
under one of WRAPPING_KEYS ({"data": [...]}). A record's place is "line 3"
(JSON Lines), "record 2 (line 9)" (a list: records count from 0, as the
list's index does, and the line is where the record starts) or
"row 2 (line 3)" (CSV: rows count from 1 after the header).

Fields are read leniently where real files vary and strictly otherwise: a
number or boolean where text is expected becomes its JSON text (`5` -> "5",
`true` -> "true"); a string where a list or object is expected is parsed as
JSON. Anything else (null, a list or object where text is expected, NaN, a
string that is not JSON of the expected shape, a missing field) raises
`DataError`, naming the file, the place, the field, the value (shortened)
and what was expected, e.g. `data/dev.jsonl, line 4: field 'answer' is None
(null); expected a string (or a finite number or a boolean, read as text).`
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import pathlib
import re
from typing import Any, Iterator, Mapping


class DataError(ValueError):
  """A data file cannot be read (the message says where and why)."""


# Keys under which a file that is one JSON object may hold its records.
WRAPPING_KEYS = ("data", "records", "examples", "items", "questions", "tasks",
                 "rows")
TEXT = "a string (or a finite number or a boolean, read as text)"

_MISSING = object()
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number",
               bool: "a boolean", list: "a list", dict: "an object"}
_SPACE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


def show(value: Any) -> str:
  """`value` for an error message: its repr (at most 60 characters) and its
  JSON kind, e.g. "[1] (a list)"."""
  text = repr(value)
  text = text if len(text) <= 60 else text[:57] + "..."
  kind = "null" if value is None else _TYPE_NAMES.get(type(value),
                                                      type(value).__name__)
  return f"{text} ({kind})"


def _is(value: Any, kinds: tuple[type, ...]) -> bool:
  if isinstance(value, bool):
    return bool in kinds
  return isinstance(value, kinds)


def _scalar_text(value: Any) -> str | None:
  """The JSON text of a boolean or finite number (5 -> "5", True -> "true");
  None for anything else."""
  if isinstance(value, (bool, int)) or (isinstance(value, float)
                                        and math.isfinite(value)):
    return json.dumps(value)
  return None


@dataclasses.dataclass(frozen=True)
class Record:
  """One record of a file, with where it came from for error messages."""
  path: pathlib.Path
  where: str  # "line 3", "record 2 (line 9)" or "row 2 (line 3)".
  data: Mapping[str, Any]
  prefix: str = ""  # Field-name prefix of a nested record ("info.").

  def error(self, field: str, problem: str, expected: str) -> DataError:
    return DataError(f"{self.path}, {self.where}: field "
                     f"{self.prefix + field!r} {problem}; expected {expected}.")

  def check(self, field: str, value: Any, kinds: tuple[type, ...],
            expected: str) -> Any:
    """`value` if it has one of `kinds`, else a DataError about `field`."""
    if value is _MISSING:
      raise self.error(field, "is missing", expected)
    if not _is(value, kinds):
      raise self.error(field, f"is {show(value)}", expected)
    return value

  def field(self, field: str, kinds: tuple[type, ...], expected: str, *,
            optional: bool = False, default: Any = None) -> Any:
    """The record's `field`; when optional, a missing or null one gives
    `default`. A list or object given as a JSON string is parsed."""
    value = self.data.get(field, _MISSING)
    if optional and (value is _MISSING or value is None):
      return default
    if isinstance(value, str) and str not in kinds and (list in kinds
                                                        or dict in kinds):
      value = self._parsed(field, value, kinds, expected)
    return self.check(field, value, kinds, expected)

  def _parsed(self, field: str, value: str, kinds: tuple[type, ...],
              expected: str) -> Any:
    try:
      parsed = json.loads(value)
    except json.JSONDecodeError as e:
      raise self.error(field, f"is {show(value)}, not JSON ({e.msg}, column "
                       f"{e.colno})", expected) from None
    if not _is(parsed, kinds):
      raise self.error(field, f"is a string holding {show(parsed)}",
                       expected)
    return parsed

  def string(self, field: str, value: Any, expected: str = TEXT) -> str:
    """`value` as text: a string as is, a boolean or finite number as its
    JSON text; anything else is a DataError about `field`."""
    text = _scalar_text(value)
    return self.check(field, value, (str,), expected) if text is None else text

  def text(self, field: str, *, optional: bool = False,
           allow_empty: bool = False) -> str:
    """A text field; required ones must not be blank unless allow_empty."""
    value = self.data.get(field, _MISSING)
    if optional and (value is _MISSING or value is None):
      return ""
    value = self.string(field, value)
    if not optional and not allow_empty and not value.strip():
      raise self.error(field, "is empty", "a non-empty string")
    return value

  def texts(self, field: str, *, optional: bool = False) -> tuple[str, ...]:
    """A list-of-text field."""
    values = self.field(field, (list,), "a list of strings",
                        optional=optional, default=[])
    return tuple(self.string(f"{field}[{i}]", value)
                 for i, value in enumerate(values))

  def sub(self, field: str, value: Any) -> Record:
    """A nested object as a record whose errors name `field.`."""
    self.check(field, value, (dict,), "an object")
    return Record(self.path, self.where, value, f"{self.prefix}{field}.")

  def nested(self, field: str, *, optional: bool = False) -> Record | None:
    """The object in `field` as a record (None when optional and absent)."""
    value = self.field(field, (dict,), "an object", optional=optional)
    return None if value is None else self.sub(field, value)


def _read_text(path: str | os.PathLike) -> tuple[pathlib.Path, str]:
  path = pathlib.Path(path)
  if not path.is_file():
    raise DataError(f"{path}: no such file; expected a path to a data file.")
  try:
    text = path.read_text(encoding="utf-8-sig")
  except UnicodeDecodeError as e:
    raise DataError(f"{path}: byte {e.start} is not UTF-8; expected a UTF-8 "
                    "text file.") from None
  if not text.strip():
    raise DataError(f"{path}: the file is empty; expected at least one "
                    "record.")
  return path, text


class _Lines:
  """Line numbers of increasing positions in a text, counted once."""

  def __init__(self, text: str):
    self.text, self.pos, self.line = text, 0, 1

  def at(self, pos: int) -> int:
    self.line += self.text.count("\n", self.pos, pos)
    self.pos = pos
    return self.line


def _json_list(path: pathlib.Path, text: str, start: int, *,
               whole_file: bool = True) -> Iterator[Record]:
  """The objects of the JSON list whose "[" is at `start`."""
  lines = _Lines(text)
  pos = _SPACE.match(text, start + 1).end()
  count = 0
  while not text.startswith("]", pos):
    if count:
      if not text.startswith(",", pos):
        raise DataError(f"{path}, line {lines.at(pos)}: {text[pos:pos + 20]!r}"
                        f" after record {count - 1}; expected ',' or ']'.")
      pos = _SPACE.match(text, pos + 1).end()
    where = f"record {count} (line {lines.at(pos)})"
    try:
      value, end = _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as e:
      raise DataError(f"{path}, {where}: not valid JSON ({e.msg} at line "
                      f"{e.lineno}, column {e.colno}); expected a JSON list "
                      "of objects.") from None
    if not isinstance(value, dict):
      raise DataError(f"{path}, {where}: the record is {show(value)}; "
                      "expected a JSON object.")
    yield Record(path, where, value)
    count += 1
    pos = _SPACE.match(text, end).end()
  if whole_file and text[pos + 1:].strip():
    raise DataError(f"{path}, line {lines.at(pos)}: text after the closing "
                    "']'; expected one JSON list.")


def _json_lines(path: pathlib.Path, text: str) -> Iterator[Record]:
  # Split on "\n" only: JSON strings may hold U+2028 and other characters
  # that str.splitlines() would break a line at.
  for number, line in enumerate(text.split("\n"), start=1):
    if not line.strip():
      continue
    try:
      value = json.loads(line)
    except json.JSONDecodeError as e:
      raise DataError(f"{path}, line {number}: not valid JSON ({e.msg}, "
                      f"column {e.colno}); expected one JSON object per "
                      "line.") from None
    if not isinstance(value, dict):
      raise DataError(f"{path}, line {number}: the line holds {show(value)};"
                      " expected a JSON object.")
    yield Record(path, f"line {number}", value)


def _first_lines(text: str, start: int) -> list[str]:
  """The first two non-blank lines from `start`."""
  lines, pos = [], start
  while len(lines) < 2 and pos < len(text):
    end = text.find("\n", pos)
    end = len(text) if end < 0 else end
    if text[pos:end].strip():
      lines.append(text[pos:end])
    pos = end + 1
  return lines


def _object_line(line: str) -> dict | None:
  try:
    value = json.loads(line)
  except json.JSONDecodeError:
    return None
  return value if isinstance(value, dict) else None


def _wrapping_key(value: dict) -> str | None:
  return next((key for key in value
               if key in WRAPPING_KEYS and isinstance(value[key], list)), None)


def _member_start(text: str, start: int, key: str) -> int:
  """Where the list under `key` starts in the valid JSON object at `start`."""
  pos = _SPACE.match(text, start + 1).end()
  while True:
    name, pos = _DECODER.raw_decode(text, pos)
    pos = _SPACE.match(text, _SPACE.match(text, pos).end() + 1).end()
    if name == key and text.startswith("[", pos):
      return pos
    _, pos = _DECODER.raw_decode(text, pos)
    pos = _SPACE.match(text, _SPACE.match(text, pos).end() + 1).end()


def _whole_object(path: pathlib.Path, text: str, start: int) -> dict:
  """The file as one JSON object over several lines."""
  expected = ("JSON Lines, a JSON list of records, or one object holding "
              f"the list under one of the keys {', '.join(WRAPPING_KEYS)}")
  try:
    value, end = _DECODER.raw_decode(text, start)
  except json.JSONDecodeError as e:
    raise DataError(f"{path}, line {e.lineno}: not valid JSON ({e.msg}, "
                    f"column {e.colno}); expected {expected}.") from None
  if text[end:].strip():
    raise DataError(f"{path}, line {_Lines(text).at(end)}: text after the "
                    f"object's closing '}}'; expected {expected}.")
  if _wrapping_key(value) is None:
    raise DataError(f"{path}: one JSON object with the keys "
                    f"{str(sorted(value))[:100]} and no list under any of "
                    f"{', '.join(WRAPPING_KEYS)}; expected {expected}.")
  return value


def _wrapped_list(path: pathlib.Path, text: str, start: int) -> int | None:
  """Where the record list starts when the file is one object wrapping it;
  None when the file is JSON Lines (its first or second line is an object
  on its own, and the first is not a one-line wrapper)."""
  first, *rest = _first_lines(text, start)
  value = _object_line(first)
  if value is None and rest and _object_line(rest[0]) is not None:
    return None  # JSON Lines with a broken first line: the lines say so.
  if value is None:
    value = _whole_object(path, text, start)
  elif rest or _wrapping_key(value) is None:
    return None
  return _member_start(text, start, _wrapping_key(value))


def _records(path: pathlib.Path, text: str) -> Iterator[Record]:
  start = _SPACE.match(text).end()
  if text.startswith("[", start):
    return _json_list(path, text, start)
  if text.startswith("{", start):
    list_start = _wrapped_list(path, text, start)
    if list_start is not None:
      return _json_list(path, text, list_start, whole_file=False)
  return _json_lines(path, text)


def json_records(path: str | os.PathLike) -> list[Record]:
  """The objects of a JSON Lines file, a JSON list, or an object wrapping
  the list (see the module docstring)."""
  path, text = _read_text(path)
  records = list(_records(path, text))
  if not records:
    raise DataError(f"{path}: the file holds no records; expected at least "
                    "one JSON object.")
  return records


def first_json_record(path: str | os.PathLike) -> Record:
  """The first record of a file `json_records` reads (in JSON Lines and
  lists, the rest is not parsed; format detection reads only this)."""
  path, text = _read_text(path)
  for record in _records(path, text):
    return record
  raise DataError(f"{path}: the file holds no records; expected at least "
                  "one JSON object.")


def csv_header(path: str | os.PathLike) -> list[str]:
  """The column names in a CSV file's first line."""
  path, text = _read_text(path)
  try:
    return next(csv.reader(text.splitlines()[:1]))
  except csv.Error as e:
    raise DataError(f"{path}, line 1: not a valid CSV header ({e}); expected "
                    "comma-separated column names.") from None


def csv_records(path: str | os.PathLike,
                columns: tuple[str, ...]) -> list[Record]:
  """The rows of a CSV file with a header naming at least `columns`; row 1 is
  the first row after the header."""
  path, text = _read_text(path)
  reader = csv.reader(text.splitlines(keepends=True))
  try:
    header = next(reader)
    missing = [c for c in columns if c not in header]
    if missing:
      raise DataError(f"{path}, line 1: the header {header} lacks the "
                      f"column(s) {missing}; expected the columns "
                      f"{list(columns)}.")
    records, start = [], reader.line_num + 1
    for row in reader:
      if any(cell.strip() for cell in row):
        where = f"row {len(records) + 1} (line {start})"
        if len(row) > len(header):
          raise DataError(f"{path}, {where}: {len(row)} cells; expected at "
                          f"most {len(header)}, one per header column.")
        records.append(Record(path, where, dict(zip(header, row))))
      start = reader.line_num + 1
  except csv.Error as e:
    raise DataError(f"{path}, line {reader.line_num}: not valid CSV ({e}); "
                    "expected comma-separated rows.") from None
  if not records:
    raise DataError(f"{path}: the file holds a header but no rows; expected "
                    "at least one row.")
  return records
