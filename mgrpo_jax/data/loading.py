"""`load_tasks`: a TaskSet from the synthetic world or a benchmark file, and
`load_corpus`: pages from a JSONL file.

  load_tasks("synthetic")                 the world's test split
  load_tasks("synthetic:train")           another split
  load_tasks("GAIA/2023/validation/metadata.jsonl")
  load_tasks("dev.json", format="hotpotqa")

A file's format is detected from its extension and first record (see
`detect_format`); `format=` overrides. Errors are `DataError`s that name the
file, the line and the field. GAIA, WebWalkerQA and XBench need the live
web (`--config.tools.backend=web`, agents/web.py); offline, give them a
corpus (`load_corpus`, `--corpus pages.jsonl`: one `{"id", "title",
"text"}` page per line).
"""

from __future__ import annotations

import os
import pathlib

from mgrpo_jax.data.corpus import Document
from mgrpo_jax.data.readers import READERS
from mgrpo_jax.data.records import (DataError, Record, csv_header,
                                    first_json_record, json_records)
from mgrpo_jax.data.task import TaskSet
from mgrpo_jax.data.world import SOURCE, SPLITS, WorldConfig
from mgrpo_jax.data.world_builder import load_world

FORMATS = tuple(READERS)  # File formats; "synthetic" names the world.

# Keys of a format's first record that identify it (any one set suffices).
_SIGNATURES = (
    ("gaia", ({"task_id", "Question"},)),
    ("musique", ({"paragraphs", "question_decomposition"},)),
    ("hotpotqa", ({"context", "supporting_facts"}, {"context", "_id"})),
    ("webwalkerqa", ({"root_url"},)),
    ("qa", ({"question", "answer"}, {"question", "answers"})),
)


def _known() -> str:
  return ", ".join(FORMATS)


def detect_format(path: str | os.PathLike) -> str:
  """The format of a benchmark file: a .csv with a canary column is xbench;
  a JSON / JSONL file is told by its first record's keys (GAIA: task_id and
  Question; MuSiQue: paragraphs and question_decomposition; HotpotQA:
  context and supporting_facts or _id; WebWalkerQA: root_url; plain
  question/answer records: question and answer or answers)."""
  path = pathlib.Path(path)
  if path.suffix.lower() == ".csv":
    header = csv_header(path)
    if "canary" in header:
      return "xbench"
    raise DataError(f"{path}, line 1: cannot tell the format from the CSV "
                    f"header {header}; expected a known format ({_known()}; "
                    "xbench has a 'canary' column), or pass format=.")
  record: Record = first_json_record(path)
  for name, key_sets in _SIGNATURES:
    if any(keys <= record.data.keys() for keys in key_sets):
      return name
  raise DataError(f"{path}, {record.where}: cannot tell the format from the "
                  f"first record's keys {sorted(record.data)}; expected a "
                  f"known format ({_known()}), or pass format=.")


def _synthetic_split(name: str, split: str | None) -> str:
  _, _, named = name.partition(":")
  if named and split and named != split:
    raise DataError(f"load_tasks({name!r}, split={split!r}): two different "
                    "splits; expected the split in the name or in split=, "
                    "not both.")
  chosen = named or split or "test"
  if chosen not in SPLITS:
    raise DataError(f"load_tasks({name!r}): split {chosen!r}; expected one "
                    f"of {', '.join(SPLITS)}.")
  return chosen


def _is_synthetic(name: str) -> bool:
  return name == SOURCE or name.startswith(f"{SOURCE}:")


def load_tasks(name_or_file: str | os.PathLike, *, split: str | None = None,
               format: str | None = None,  # pylint: disable=redefined-builtin
               data_dir: str | os.PathLike | None = None,
               limit: int | None = None,
               world: WorldConfig | None = None) -> TaskSet:
  """Tasks (and their corpus, when the source has one) by name or file.

  Args:
    name_or_file: "synthetic" or "synthetic:<split>" for the synthetic world
      (an existing file of that name is read as a file), else a file path.
    split: the world's split (default "test"); files ignore it.
    format: a file's format, one of FORMATS; detected when None.
    data_dir: the world's tfds directory (default $MGRPO_JAX_CACHE/tfds).
    limit: keep the first `limit` tasks (None: all).
    world: the world to load (default WorldConfig()).
  """
  if limit is not None and (isinstance(limit, bool)
                            or not isinstance(limit, int) or limit < 1):
    raise ValueError(f"load_tasks: limit={limit!r}; expected a positive "
                     "integer or None.")
  name = os.fspath(name_or_file)
  if _is_synthetic(name) and not os.path.exists(name):
    tasks = load_world(_synthetic_split(name, split),
                       config=world or WorldConfig(), data_dir=data_dir)
    return TaskSet(tasks.name, tasks.tasks[:limit], tasks.documents)
  path = pathlib.Path(name)
  if not path.is_file():
    raise DataError(f"{path}: no such file; expected a path to a benchmark "
                    f"file ({_known()}) or '{SOURCE}[:split]'.")
  if format is None:
    format = detect_format(path)
  if format not in READERS:
    raise DataError(f"{path}: format={format!r}; expected one of "
                    f"{_known()}.")
  return READERS[format](path, limit=limit)


def load_corpus(path: str | os.PathLike) -> tuple[Document, ...]:
  """Pages from a JSONL (or JSON list) file of {"id", "title", "text"}
  objects, for benchmarks that bring no paragraphs of their own."""
  documents, seen = [], {}
  for record in json_records(path):
    doc_id = record.text("id")
    if doc_id in seen:
      raise record.error("id", f"repeats {doc_id!r} (first at {seen[doc_id]})",
                         "unique page ids")
    seen[doc_id] = record.where
    documents.append(Document(doc_id, record.text("title", allow_empty=True),
                              record.text("text")))
  return tuple(documents)
