"""What every data source yields: questions with gold answers, and a corpus.

A `Task` is one question the main agent must answer. A `TaskSet` is a list
of tasks and the local corpus their tools search (the synthetic world's
pages, the paragraphs HotpotQA / MuSiQue carry); benchmarks that need the
live web (GAIA, WebWalkerQA, XBench-DeepSearch) come with no documents, and
a corpus must then be supplied separately.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mgrpo_jax.data.corpus import Document


@dataclasses.dataclass(frozen=True)
class SubQuestion:
  """One step of a question's decomposition and its gold answer."""
  question: str
  answer: str
  doc_id: str = ""  # The page that states the answer, when the data says.


@dataclasses.dataclass(frozen=True)
class Task:
  """One question, its accepted answers and what is known about it."""
  task_id: str  # Unique within its TaskSet.
  question: str
  answers: tuple[str, ...]  # Gold answer first, then aliases; any one counts.
  source: str  # "synthetic", "gaia", "webwalkerqa", "xbench", "hotpotqa", ...
  level: str = ""  # Difficulty label used in breakdowns ("1", "3-hop", ...).
  hops: int | None = None  # Reasoning hops, when known.
  sub_questions: tuple[SubQuestion, ...] = ()  # Gold decomposition, if any.
  metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if not self.task_id:
      raise ValueError("Task.task_id is empty.")
    if not self.question.strip():
      raise ValueError(f"Task {self.task_id!r}: the question is empty.")
    if not self.answers or not all(isinstance(a, str) for a in self.answers):
      raise ValueError(f"Task {self.task_id!r}: answers={self.answers!r}; "
                       "expected at least one answer string.")
    object.__setattr__(self, "answers", tuple(self.answers))
    object.__setattr__(self, "sub_questions", tuple(self.sub_questions))

  @property
  def answer(self) -> str:
    """The gold answer (the first of `answers`)."""
    return self.answers[0]


@dataclasses.dataclass(frozen=True)
class TaskSet:
  """Tasks and the corpus their tools search (may be empty)."""
  name: str
  tasks: tuple[Task, ...]
  documents: tuple[Document, ...] = ()

  def __post_init__(self):
    object.__setattr__(self, "tasks", tuple(self.tasks))
    object.__setattr__(self, "documents", tuple(self.documents))
    seen: set[str] = set()
    for task in self.tasks:
      if task.task_id in seen:
        raise ValueError(f"TaskSet {self.name!r}: task id {task.task_id!r} "
                         "appears twice; ids must be unique.")
      seen.add(task.task_id)
