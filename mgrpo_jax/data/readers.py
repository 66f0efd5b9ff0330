"""Readers for benchmark files a user supplies; each returns a `TaskSet`.

  read_gaia(path)         GAIA `metadata.jsonl`
  read_webwalkerqa(path)  WebWalkerQA, a JSON list or JSONL
  read_xbench(path)       XBench-DeepSearch CSV (text XOR-ed with the canary)
  read_hotpotqa(path)     HotpotQA, a JSON list or JSONL; paragraphs -> corpus
  read_musique(path)      MuSiQue JSONL; paragraphs -> corpus

Files are read as given; nothing is downloaded. `limit` keeps the first
records only (and, for the corpus, only their paragraphs). Bad input (a
missing or empty file, a line that is not JSON, a missing field, a value of
the wrong type, a row that does not decrypt) raises `DataError`, whose message
names the file, the line (JSON) or row (CSV), the field and what was expected.
"""

from __future__ import annotations

import base64
import binascii
import csv
import dataclasses
import hashlib
import json
import os
import pathlib
import re
import unicodedata
from typing import Any, Iterator, Mapping

from mgrpo_jax.data.corpus import Document
from mgrpo_jax.data.task import SubQuestion, Task, TaskSet


class DataError(ValueError):
  """A data file cannot be read (the message says where and why)."""


_MISSING = object()
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number",
               bool: "a boolean", list: "a list", dict: "an object"}


def _show(value: Any) -> str:
  text = repr(value)
  text = text if len(text) <= 60 else text[:57] + "..."
  kind = "null" if value is None else _TYPE_NAMES.get(type(value),
                                                      type(value).__name__)
  return f"{text} ({kind})"


def _is(value: Any, kinds: tuple[type, ...]) -> bool:
  if isinstance(value, bool):
    return bool in kinds
  return isinstance(value, kinds)


@dataclasses.dataclass(frozen=True)
class Record:
  """One record of a file, with where it came from for error messages."""
  path: pathlib.Path
  where: str  # "line 3" (JSON) or "row 2 (line 3)" (CSV).
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
      raise self.error(field, f"is {_show(value)}", expected)
    return value

  def field(self, field: str, kinds: tuple[type, ...], expected: str, *,
            optional: bool = False, default: Any = None) -> Any:
    """The record's `field`; when optional, a missing or null one gives
    `default`."""
    value = self.data.get(field, _MISSING)
    if optional and (value is _MISSING or value is None):
      return default
    return self.check(field, value, kinds, expected)

  def text(self, field: str, *, optional: bool = False,
           allow_empty: bool = False) -> str:
    """A string field; required ones must not be blank unless allow_empty."""
    value = self.field(field, (str,), "a string", optional=optional,
                       default="")
    if not optional and not allow_empty and not value.strip():
      raise self.error(field, "is empty", "a non-empty string")
    return value

  def texts(self, field: str, *, optional: bool = False) -> tuple[str, ...]:
    """A list-of-strings field."""
    values = self.field(field, (list,), "a list of strings",
                        optional=optional, default=[])
    for i, value in enumerate(values):
      self.check(f"{field}[{i}]", value, (str,), "a string")
    return tuple(values)

  def sub(self, field: str, value: Any) -> Record:
    """A nested object as a record whose errors name `field.`."""
    self.check(field, value, (dict,), "an object")
    return Record(self.path, self.where, value, f"{self.prefix}{field}.")


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


def _line_of(text: str, pos: int) -> int:
  return text.count("\n", 0, pos) + 1


def _json_list(path: pathlib.Path, text: str) -> Iterator[Record]:
  """The objects of a JSON list, each with the line it starts on."""
  decoder = json.JSONDecoder()
  space = re.compile(r"\s*")
  pos = space.match(text, text.index("[") + 1).end()
  count = 0
  while True:
    if text.startswith("]", pos):
      break
    if count:
      if not text.startswith(",", pos):
        raise DataError(f"{path}, line {_line_of(text, pos)}: expected ',' "
                        "or ']' between the list's records.")
      pos = space.match(text, pos + 1).end()
    try:
      value, end = decoder.raw_decode(text, pos)
    except json.JSONDecodeError as e:
      raise DataError(f"{path}, line {e.lineno}: not valid JSON ({e.msg}, "
                      f"column {e.colno}); expected a JSON list of "
                      "objects.") from None
    where = f"line {_line_of(text, pos)}"
    if not isinstance(value, dict):
      raise DataError(f"{path}, {where}: record {count} is {_show(value)}; "
                      "expected a JSON object.")
    yield Record(path, where, value)
    count += 1
    pos = space.match(text, end).end()
  if text[pos + 1:].strip():
    raise DataError(f"{path}, line {_line_of(text, pos + 1)}: text after the "
                    "closing ']'; expected one JSON list.")


def _json_lines(path: pathlib.Path, text: str) -> Iterator[Record]:
  for number, line in enumerate(text.splitlines(), start=1):
    if not line.strip():
      continue
    try:
      value = json.loads(line)
    except json.JSONDecodeError as e:
      raise DataError(f"{path}, line {number}: not valid JSON ({e.msg}, "
                      f"column {e.colno}); expected one JSON object per "
                      "line.") from None
    if not isinstance(value, dict):
      raise DataError(f"{path}, line {number}: the line holds {_show(value)};"
                      " expected a JSON object.")
    yield Record(path, f"line {number}", value)


def json_records(path: str | os.PathLike) -> list[Record]:
  """The objects of a JSON list file or a JSONL file (one per line)."""
  path, text = _read_text(path)
  records = list(_json_list(path, text) if text.lstrip().startswith("[")
                 else _json_lines(path, text))
  if not records:
    raise DataError(f"{path}: the file holds no records; expected at least "
                    "one JSON object.")
  return records


def first_json_record(path: str | os.PathLike) -> Record:
  """The first object of a JSON list or JSONL file (the rest is not parsed;
  format detection reads only this)."""
  path, text = _read_text(path)
  records = (_json_list(path, text) if text.lstrip().startswith("[")
             else _json_lines(path, text))
  for record in records:
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


def _first(records: list[Record], limit: int | None) -> list[Record]:
  """The first `limit` records (all when None)."""
  if limit is None:
    return records
  if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
    raise ValueError(f"limit={limit!r}: expected a positive integer or None.")
  return records[:limit]


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


def doc_id_for(prefix: str, *key: str) -> str:
  """A stable page id from the page's identity (its title, or title and
  text): `prefix` and 12 hex digits of a SHA-1."""
  digest = hashlib.sha1("\n".join(key).encode("utf-8")).hexdigest()
  return f"{prefix}{digest[:12]}"


def _task_set(name: str, records: list[Record], tasks: list[Task],
              documents: tuple[Document, ...] = ()) -> TaskSet:
  seen: dict[str, str] = {}
  for record, task in zip(records, tasks):
    if task.task_id in seen:
      raise DataError(f"{record.path}, {record.where}: task id "
                      f"{task.task_id!r} already appears at "
                      f"{seen[task.task_id]}; expected unique ids.")
    seen[task.task_id] = record.where
  return TaskSet(name, tasks, documents)


def read_gaia(path: str | os.PathLike, *,
              limit: int | None = None) -> TaskSet:
  """GAIA's metadata.jsonl. Tasks with an attached file keep its name and
  path in metadata ("file_name", "file_path"); the tools cannot open it."""
  records = _first(json_records(path), limit)
  tasks = []
  for record in records:
    level = record.field("Level", (int, str), "an integer or a string")
    metadata: dict[str, Any] = {}
    file_name = record.text("file_name", optional=True)
    if file_name:
      metadata["file_name"] = file_name
      metadata["file_path"] = str(record.path.parent / file_name)
    annotator = record.field("Annotator Metadata", (dict,), "an object",
                             optional=True)
    if annotator is not None:
      metadata["annotator"] = annotator
    tasks.append(Task(record.text("task_id"), record.text("Question"),
                      (record.text("Final answer"),), "gaia", level=str(level),
                      metadata=metadata))
  return _task_set(f"gaia:{records[0].path.name}", records, tasks)


def read_webwalkerqa(path: str | os.PathLike, *,
                     limit: int | None = None) -> TaskSet:
  """WebWalkerQA records (question, answer, root_url, info{...}); the level
  is info.difficulty_level; ids are "webwalkerqa-<record number>"."""
  records = _first(json_records(path), limit)
  tasks = []
  for n, record in enumerate(records):
    metadata: dict[str, Any] = {"root_url": record.text("root_url")}
    level = ""
    if record.field("info", (dict,), "an object", optional=True) is not None:
      info = record.sub("info", record.data["info"])
      level = info.text("difficulty_level", optional=True)
      metadata["info"] = dict(info.data)
    task_id = f"webwalkerqa-{n:05d}"
    tasks.append(Task(task_id, record.text("question"),
                      (record.text("answer"),), "webwalkerqa", level=level,
                      metadata=metadata))
  return _task_set(f"webwalkerqa:{records[0].path.name}", records, tasks)


XBENCH_COLUMNS = ("id", "prompt", "answer", "canary")


def xor_text(data: bytes, key: str) -> bytes:
  """`data` XOR-ed with the UTF-8 bytes of `key` repeated (its own inverse)."""
  key_bytes = key.encode("utf-8")
  return bytes(b ^ key_bytes[i % len(key_bytes)] for i, b in enumerate(data))


def _xbench_field(record: Record, field: str, key: str) -> str:
  expected = "base64 of UTF-8 text XOR-ed with this row's canary"
  encoded = record.text(field).strip()
  try:
    data = base64.b64decode(encoded, validate=True)
  except (binascii.Error, ValueError):
    raise record.error(field, f"is {_show(encoded)}, not base64",
                       expected) from None
  try:
    text = xor_text(data, key).decode("utf-8")
  except UnicodeDecodeError:
    raise record.error(field, "does not decrypt to UTF-8 text with the "
                       "canary (a wrong canary?)", expected) from None
  if any(unicodedata.category(c) == "Cc" and c not in "\t\n\r" for c in text):
    raise record.error(field, "decrypts to text with control characters (a "
                       "wrong canary?)", expected)
  return text


def read_xbench(path: str | os.PathLike, *,
                limit: int | None = None) -> TaskSet:
  """XBench-DeepSearch CSV: id, prompt, answer, reference_steps (optional),
  canary; the three text columns are base64 of UTF-8 text XOR-ed with the
  row's canary as a repeating key."""
  records = _first(csv_records(path, XBENCH_COLUMNS), limit)
  tasks = []
  for record in records:
    key = record.text("canary")
    question = _xbench_field(record, "prompt", key)
    answer = _xbench_field(record, "answer", key)
    for field, value in (("prompt", question), ("answer", answer)):
      if not value.strip():
        raise record.error(field, "decrypts to blank text",
                           "a non-empty question and answer")
    metadata = {}
    if record.text("reference_steps", optional=True).strip():
      metadata["reference_steps"] = _xbench_field(record, "reference_steps",
                                                  key)
    tasks.append(Task(f"xbench-{record.text('id')}", question, (answer,),
                      "xbench", metadata=metadata))
  return _task_set(f"xbench:{records[0].path.name}", records, tasks)


class _Corpus:
  """Pages gathered across a file's records, one per key, first seen kept."""

  def __init__(self, prefix: str):
    self.prefix = prefix
    self.documents: dict[str, Document] = {}
    self._keys: dict[str, tuple[str, ...]] = {}

  def add(self, record: Record, title: str, text: str,
          key: tuple[str, ...]) -> str:
    doc_id = doc_id_for(self.prefix, *key)
    if doc_id not in self.documents:
      self.documents[doc_id] = Document(doc_id, title, text)
      self._keys[doc_id] = key
    elif self._keys[doc_id] != key:
      raise DataError(f"{record.path}, {record.where}: pages {key[0]!r} and "
                      f"{self._keys[doc_id][0]!r} hash to the same id "
                      f"{doc_id!r}; expected distinct ids (rename one).")
    return doc_id


def read_hotpotqa(path: str | os.PathLike, *,
                  limit: int | None = None) -> TaskSet:
  """HotpotQA records (_id, question, answer, type, level, supporting_facts,
  context). Every context paragraph becomes a page (one per title, the first
  seen kept, id "hp" + a hash of the title); hops=2."""
  records = _first(json_records(path), limit)
  corpus = _Corpus("hp")
  tasks = []
  for record in records:
    ids = {}
    context = record.field("context", (list,), "a list of [title, sentences]")
    for i, pair in enumerate(context):
      field = f"context[{i}]"
      record.check(field, pair, (list,), "a [title, sentences] pair")
      if len(pair) != 2:
        raise record.error(field, f"is {_show(pair)}",
                           "a [title, sentences] pair")
      title = record.check(f"{field}[0]", pair[0], (str,), "a title string")
      sentences = record.check(f"{field}[1]", pair[1], (list,),
                               "a list of sentence strings")
      for j, sentence in enumerate(sentences):
        record.check(f"{field}[1][{j}]", sentence, (str,), "a string")
      text = " ".join(s.strip() for s in sentences if s.strip())
      ids[title] = corpus.add(record, title, text, (title,))
    facts = record.field("supporting_facts", (list,),
                         "a list of [title, sentence index]", optional=True,
                         default=[])
    supporting = []
    for i, fact in enumerate(facts):
      field = f"supporting_facts[{i}]"
      if not _is(fact, (list,)) or len(fact) != 2 or not _is(
          fact[0], (str,)) or not _is(fact[1], (int,)):
        raise record.error(field, f"is {_show(fact)}",
                           "a [title, sentence index] pair")
      supporting.append((fact[0], fact[1]))
    metadata = {"type": record.text("type", optional=True),
                "supporting_facts": tuple(supporting),
                "supporting_doc_ids": tuple(dict.fromkeys(
                    ids[t] for t, _ in supporting if t in ids))}
    tasks.append(Task(record.text("_id"), record.text("question"),
                      (record.text("answer"),), "hotpotqa",
                      level=record.text("level", optional=True), hops=2,
                      metadata=metadata))
  return _task_set(f"hotpotqa:{records[0].path.name}", records, tasks,
                   tuple(corpus.documents.values()))


_REFERENCE = re.compile(r"#(\d+)")


def _substitute(question: str, answers: list[str]) -> str:
  """MuSiQue's "#k" (the k-th step's answer) replaced by that answer."""

  def answer(match: re.Match) -> str:
    k = int(match.group(1))
    return answers[k - 1] if 1 <= k <= len(answers) else match.group(0)

  return _REFERENCE.sub(answer, question)


def read_musique(path: str | os.PathLike, *,
                 limit: int | None = None) -> TaskSet:
  """MuSiQue records (id, question, answer, answer_aliases, answerable,
  paragraphs, question_decomposition). Sub-questions come from the
  decomposition with "#k" replaced by step k's answer; paragraphs become
  pages (one per (title, text), id "mq" + a hash of both)."""
  records = _first(json_records(path), limit)
  corpus = _Corpus("mq")
  tasks = []
  for record in records:
    by_idx = {}
    paragraphs = record.field("paragraphs", (list,), "a list of paragraphs")
    for i, value in enumerate(paragraphs):
      paragraph = record.sub(f"paragraphs[{i}]", value)
      title = paragraph.text("title", allow_empty=True)
      text = paragraph.text("paragraph_text")
      idx = paragraph.field("idx", (int,), "an integer", optional=True,
                            default=i)
      by_idx[idx] = (corpus.add(record, title, text, (title, text)),
                     paragraph.field("is_supporting", (bool,), "a boolean",
                                     optional=True, default=False))
    steps = record.field("question_decomposition", (list,),
                         "a list of decomposition steps")
    if not steps:
      raise record.error("question_decomposition", "is empty",
                         "at least one step")
    sub_questions, answers = [], []
    for i, value in enumerate(steps):
      step = record.sub(f"question_decomposition[{i}]", value)
      question = _substitute(step.text("question"), answers)
      answers.append(step.text("answer", allow_empty=True))
      sub_questions.append(SubQuestion(question, answers[-1]))
    answer = record.text("answer")
    aliases = record.texts("answer_aliases", optional=True)
    metadata = {
        "answerable": record.field("answerable", (bool,), "a boolean",
                                   optional=True, default=True),
        "supporting_doc_ids": tuple(d for d, s in by_idx.values() if s)}
    hops = len(sub_questions)
    tasks.append(Task(record.text("id"), record.text("question"),
                      tuple(dict.fromkeys((answer,) + aliases)), "musique",
                      level=f"{hops}-hop", hops=hops,
                      sub_questions=sub_questions, metadata=metadata))
  return _task_set(f"musique:{records[0].path.name}", records, tasks,
                   tuple(corpus.documents.values()))


READERS = {
    "gaia": read_gaia,
    "webwalkerqa": read_webwalkerqa,
    "xbench": read_xbench,
    "hotpotqa": read_hotpotqa,
    "musique": read_musique,
}
