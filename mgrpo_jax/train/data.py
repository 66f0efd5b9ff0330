"""The trainer's questions: the train split in a fixed order per epoch, the
validation and held-out test questions, and what the tools search.

Each split comes from `config.data.<split>`: "synthetic" (that split of the
generated world, `config.world`) or a question file any reader takes
(HotpotQA, MuSiQue, GAIA-style JSON / JSONL, plain question/answer JSONL;
data/loading.py). The tools search `config.data.corpus` ("files": the pages
the splits carry, the world's pages for "synthetic"; or a JSONL of pages),
or the web when `config.tools.backend` is "web" (agents/web.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
from typing import Any, Sequence

import numpy as np

from mgrpo_jax.agents.tools import SearchBackend
from mgrpo_jax.data.corpus import Document, LocalCorpus
from mgrpo_jax.data.loading import load_corpus, load_tasks
from mgrpo_jax.data.records import DataError
from mgrpo_jax.data.task import Task, TaskSet
from mgrpo_jax.data.world import SOURCE, WorldConfig

SPLITS = ("train", "validation", "test")
FILES = "files"  # config.data.corpus: the pages the splits' files carry.
# The data section that reproduces the trainer from before it had one (the
# generated world everywhere): left out of cache keys and fingerprints
# (`identity`), so runs and warm starts of earlier versions still match.
SYNTHETIC_DATA = {"train": SOURCE, "validation": SOURCE, "test": SOURCE,
                  "format": "", "train_questions": 0, "corpus": FILES}


@dataclasses.dataclass
class Data:
  """The train questions (shuffled per epoch), validation, the tools'
  backend, and the held-out test questions (train.test_questions; never
  used for a choice: only logged). `documents` are the local corpus's pages
  (empty with the web backend): the diagnostics grade reports from them."""
  train: list[Task]
  validation: list[Task]
  backend: SearchBackend
  seed: int
  test: list[Task] = dataclasses.field(default_factory=list)
  documents: tuple[Document, ...] = ()

  def batch(self, step: int, size: int) -> list[Task]:
    """Questions of `step`: a fixed permutation per epoch, so a resumed run
    sees exactly the questions an uninterrupted one would."""
    n = len(self.train)
    out = []
    for i in range(step * size, (step + 1) * size):
      epoch, pos = divmod(i, n)
      order = np.random.default_rng([self.seed, epoch]).permutation(n)
      out.append(self.train[order[pos]])
    return out


def data_section(config) -> dict[str, Any]:
  """`config.data` as a dict (the generated world's for a config without
  one)."""
  return config.data.to_dict() if "data" in config else dict(SYNTHETIC_DATA)


def is_synthetic(config) -> bool:
  """Whether every split is the generated world's and the tools search its
  pages (no data files)."""
  data = data_section(config)
  return (all(data[s] == SOURCE for s in SPLITS)
          and data["corpus"] == FILES)


def limit_of(config, split: str) -> int | None:
  """The questions `split` keeps (None: all; 0: the test split is not
  used). Validation keeps train.eval_questions, test train.test_questions."""
  if split == "train":
    return data_section(config)["train_questions"] or None
  if split == "validation":
    return config.train.eval_questions
  return int(config.train.test_questions)


def load_split(config, split: str) -> TaskSet:
  """One split's questions (and the pages its file carries), limited."""
  source = data_section(config)[split]
  limit = limit_of(config, split)
  world = WorldConfig(**config.world.to_dict())
  if source == SOURCE:
    return load_tasks(SOURCE, split=split, world=world, limit=limit)
  try:
    taskset = load_tasks(source, format=data_section(config)["format"]
                         or None, limit=limit)
  except DataError as e:
    raise DataError(f"config.data.{split}={source!r}: {e}") from e
  if not taskset.tasks:
    raise DataError(f"config.data.{split}={source!r}: holds no questions; "
                    "expected at least one.")
  return taskset


def merged_documents(tasksets: Sequence[tuple[str, TaskSet]]
                     ) -> tuple[Document, ...]:
  """The pages of (name, TaskSet)s, each id once, in order of first
  appearance; an id two of them give different pages is a DataError."""
  seen: dict[str, tuple[Document, str]] = {}
  for name, taskset in tasksets:
    for doc in taskset.documents:
      if doc.doc_id not in seen:
        seen[doc.doc_id] = (doc, name)
      elif seen[doc.doc_id][0] != doc:
        raise DataError(
            f"{name} and {seen[doc.doc_id][1]} give different pages the id "
            f"{doc.doc_id!r}; expected one page per id across the splits' "
            "files (or a shared corpus in config.data.corpus).")
  return tuple(doc for doc, _ in seen.values())


def corpus_documents(config, tasksets: Sequence[tuple[str, TaskSet]]
                     ) -> tuple[Document, ...]:
  """The pages `config.data.corpus` names: the splits' own, or a file's."""
  corpus = data_section(config)["corpus"]
  if corpus != FILES:
    try:
      return load_corpus(corpus)
    except DataError as e:
      raise DataError(f"config.data.corpus={corpus!r}: {e}") from e
  documents = merged_documents(tasksets)
  if not documents:
    raise DataError(
        f"config.data.corpus={FILES!r}: the data files carry no pages to "
        "search; expected a JSONL of {id, title, text} pages in "
        "config.data.corpus, or config.tools.backend='web'.")
  return documents


def uses_web(config) -> bool:
  return "tools" in config and config.tools.backend == "web"


def search_backend(config, documents: Sequence[Document], source: str
                   ) -> SearchBackend:
  """The backend `config.tools.backend` names, for training and `evaluate`
  alike: the web (agents/web.py, `config.tools.web`), or BM25 over
  `documents` (`source` names them in messages)."""
  if uses_web(config):
    from mgrpo_jax.agents.web import WebBackend, WebConfig  # pylint: disable=g-import-not-at-top
    return WebBackend(WebConfig(**config.tools.web.to_dict()))
  return LocalCorpus(documents, source=source)


def load_data(config) -> Data:
  splits = {split: load_split(config, split) for split in SPLITS
            if limit_of(config, split) != 0}
  named = [(f"config.data.{s}={data_section(config)[s]!r}", t)
           for s, t in splits.items()]
  documents = (merged_documents(named) if uses_web(config)
               else corpus_documents(config, named))
  backend = search_backend(
      config, documents, "synthetic world" if is_synthetic(config)
      else str(data_section(config)["corpus"]))
  test = splits.get("test")
  return Data(list(splits["train"].tasks), list(splits["validation"].tasks),
              backend, config.seed, list(test.tasks) if test else [],
              documents)


def file_digest(path: str) -> str:
  """sha256 of a file's bytes (16 hex digits)."""
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()[:16]


def identity(config) -> dict[str, Any]:
  """What the run's data is, for cache keys and fingerprints: {} for the
  generated world alone (as before the data section existed), else the
  data section with each file's digest (a changed file changes the key)."""
  if is_synthetic(config):
    return {}
  data = data_section(config)
  files = {}
  for field in (*SPLITS, "corpus"):
    value = data[field]
    if value not in (SOURCE, FILES) and pathlib.Path(value).is_file():
      files[field] = file_digest(value)
  return {"data": data, "files": files}
