"""Readers for benchmark files a user supplies; each returns a `TaskSet`.

  read_gaia(path)         GAIA `metadata.jsonl`
  read_webwalkerqa(path)  WebWalkerQA
  read_xbench(path)       XBench-DeepSearch CSV (text XOR-ed with the canary)
  read_hotpotqa(path)     HotpotQA; paragraphs -> corpus
  read_musique(path)      MuSiQue; paragraphs -> corpus
  read_qa(path)           plain {"question", "answer"} records

Files are read as given; nothing is downloaded. The JSON readers take JSON
Lines, a JSON list of records, or one object holding that list under a key
such as "data" (see `records`); numbers and booleans where text is expected
are read as text (HotpotQA's integer `_id`s), and lists or objects given as
JSON strings (`context`, `paragraphs`, `Annotator Metadata`) are parsed.
`limit` keeps the first records only (and, for the corpus, only their
paragraphs). Bad input (a missing or empty file, a line that is not JSON, a
missing field, a value of the wrong type, a row that does not decrypt)
raises `DataError`, whose message names the file, the line, record or row,
the field, the value and what was expected.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import unicodedata
from typing import Any

from mgrpo_jax.data.corpus import Document
from mgrpo_jax.data.records import (DataError, Record, csv_records,
                                    json_records, show)
from mgrpo_jax.data.task import SubQuestion, Task, TaskSet


def _first(records: list[Record], limit: int | None) -> list[Record]:
  """The first `limit` records (all when None)."""
  if limit is None:
    return records
  if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
    raise ValueError(f"limit={limit!r}: expected a positive integer or None.")
  return records[:limit]


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
                      (record.text("Final answer"),), "gaia",
                      level=record.text("Level"), metadata=metadata))
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
    info = record.nested("info", optional=True)
    if info is not None:
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
    raise record.error(field, f"is {show(encoded)}, not base64",
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
          key: tuple[str, ...], doc_id: str | None = None) -> str:
    """The page's id (`doc_id`, else a hash of `key`), added if new."""
    given = doc_id is not None
    doc_id = doc_id if given else doc_id_for(self.prefix, *key)
    if doc_id not in self.documents:
      self.documents[doc_id] = Document(doc_id, title, text)
      self._keys[doc_id] = key
    elif self._keys[doc_id] != key:
      why = "has the id" if given else "hash to the same id"
      raise DataError(f"{record.path}, {record.where}: pages {key[0]!r} and "
                      f"{self._keys[doc_id][0]!r} {why} {doc_id!r}; expected "
                      "distinct ids (rename one).")
    return doc_id


def _hotpot_context(record: Record, corpus: _Corpus) -> dict[str, str]:
  """A HotpotQA record's context paragraphs added to `corpus`; their doc ids
  by title."""
  ids = {}
  context = record.field("context", (list,), "a list of [title, sentences]")
  for i, pair in enumerate(context):
    field = f"context[{i}]"
    record.check(field, pair, (list,), "a [title, sentences] pair")
    if len(pair) != 2:
      raise record.error(field, f"is {show(pair)}", "a [title, sentences] pair")
    title = record.string(f"{field}[0]", pair[0])
    sentences = record.check(f"{field}[1]", pair[1], (list,),
                             "a list of sentence strings")
    sentences = [record.string(f"{field}[1][{j}]", sentence)
                 for j, sentence in enumerate(sentences)]
    text = " ".join(s.strip() for s in sentences if s.strip())
    ids[title] = corpus.add(record, title, text, (title,))
  return ids


def _hotpot_facts(record: Record) -> list[tuple[str, int]]:
  """A HotpotQA record's supporting facts as (title, sentence index)."""
  facts = record.field("supporting_facts", (list,),
                       "a list of [title, sentence index]", optional=True,
                       default=[])
  supporting = []
  for i, fact in enumerate(facts):
    field = f"supporting_facts[{i}]"
    if not isinstance(fact, list) or len(fact) != 2:
      raise record.error(field, f"is {show(fact)}",
                         "a [title, sentence index] pair")
    supporting.append((record.string(f"{field}[0]", fact[0]),
                       record.check(f"{field}[1]", fact[1], (int,),
                                    "a sentence index (an integer)")))
  return supporting


def read_hotpotqa(path: str | os.PathLike, *,
                  limit: int | None = None) -> TaskSet:
  """HotpotQA records (_id, question, answer, type, level, supporting_facts,
  context). Every context paragraph becomes a page (one per title, the first
  seen kept, id "hp" + a hash of the title); hops=2."""
  records = _first(json_records(path), limit)
  corpus = _Corpus("hp")
  tasks = []
  for record in records:
    ids = _hotpot_context(record, corpus)
    supporting = _hotpot_facts(record)
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


def _musique_paragraphs(record: Record,
                        corpus: _Corpus) -> dict[int, tuple[str, bool]]:
  """A MuSiQue record's paragraphs added to `corpus`: (doc id, is
  supporting) by paragraph idx. A paragraph's optional "id" (not in
  MuSiQue's files; `data/export.py` writes it) is its page id."""
  by_idx = {}
  paragraphs = record.field("paragraphs", (list,), "a list of paragraphs")
  for i, value in enumerate(paragraphs):
    paragraph = record.sub(f"paragraphs[{i}]", value)
    title = paragraph.text("title", allow_empty=True)
    text = paragraph.text("paragraph_text")
    idx = paragraph.field("idx", (int,), "an integer", optional=True,
                          default=i)
    doc_id = paragraph.text("id", optional=True)
    by_idx[idx] = (corpus.add(record, title, text, (title, text),
                              doc_id=doc_id or None),
                   paragraph.field("is_supporting", (bool,), "a boolean",
                                   optional=True, default=False))
  return by_idx


def _musique_steps(record: Record,
                   by_idx: dict[int, tuple[str, bool]]) -> list[SubQuestion]:
  """A MuSiQue record's decomposition, "#k" replaced by step k's answer;
  a step's paragraph_support_idx (optional) names its page."""
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
    support = step.field("paragraph_support_idx", (int,),
                         "the idx of one of the record's paragraphs",
                         optional=True, default=None)
    if support is not None and support not in by_idx:
      raise step.error("paragraph_support_idx", f"is {support}, which no "
                       f"paragraph has (idx {sorted(by_idx)})",
                       "the idx of one of the record's paragraphs")
    sub_questions.append(SubQuestion(
        question, answers[-1],
        by_idx[support][0] if support is not None else ""))
  return sub_questions


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
    by_idx = _musique_paragraphs(record, corpus)
    sub_questions = _musique_steps(record, by_idx)
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


def read_qa(path: str | os.PathLike, *,
            limit: int | None = None) -> TaskSet:
  """Plain question/answer records: "question", and "answer" (a string) or
  "answers" (a list, the first the gold answer, the rest aliases); optional
  "id" (default "qa-<record number>"), "level" and "hops". No corpus: the
  tools search `config.data.corpus` or the web."""
  records = _first(json_records(path), limit)
  tasks = []
  for n, record in enumerate(records):
    if "answers" in record.data:
      answers = record.texts("answers")
      if not answers:
        raise record.error("answers", "is empty", "at least one answer")
    else:
      answers = (record.text("answer"),)
    hops = record.field("hops", (int,), "an integer >= 1", optional=True,
                        default=None)
    if hops is not None and hops < 1:
      raise record.error("hops", f"is {hops}", "an integer >= 1")
    tasks.append(Task(record.text("id", optional=True) or f"qa-{n:05d}",
                      record.text("question"), tuple(dict.fromkeys(answers)),
                      "qa", level=record.text("level", optional=True),
                      hops=hops))
  return _task_set(f"qa:{records[0].path.name}", records, tasks)


READERS = {
    "gaia": read_gaia,
    "webwalkerqa": read_webwalkerqa,
    "xbench": read_xbench,
    "hotpotqa": read_hotpotqa,
    "musique": read_musique,
    "qa": read_qa,
}
