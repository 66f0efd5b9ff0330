"""Novel facts: which questions the warm start never showed the answer to.

A demonstration shows a hop's fact when its text (a conversation's token
ids decoded: questions, tool calls, search results, pages visited,
reports) holds the sentence that states it ("Nuko Besho works for Tavi
Labs."), or the hop's one-hop question together with its answer (a
sub-agent asked "Which company does Nuko Besho work for?" that reports
"Tavi Labs" teaches the fact without the sentence). A question is novel
when no demonstration shows any of its hops' facts, nor the question with
its answer. Its accuracy ("novel-fact accuracy") is what a team that reads
scores and one that recalls does not: the figure the testbed's comparison
is judged on (data/demo_worlds.py makes every question novel). Questions
whose hops are not the world's relations (a file's decomposition) have no
fact to look for: neither novel nor not.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mgrpo_jax.data.facts import hop_facts
from mgrpo_jax.data.task import Task


def _shown(text: str, statements: Sequence[tuple[str, ...]]) -> bool:
  """Whether `text` holds every string of one of `statements`."""
  return any(all(s in text for s in statement) for statement in statements)


class Novelty:
  """Which tasks' facts the demonstrations (their texts) never showed."""

  def __init__(self, texts: Sequence[str]):
    self.texts = tuple(texts)
    self._joined = "\n".join(self.texts)

  @classmethod
  def of_trajectories(cls, trajectories, tokenizer) -> "Novelty":
    """From the warm start's trajectories (token ids) and their tokenizer."""
    return cls([tokenizer.decode(list(t.tokens)) for t in trajectories])

  def shown(self, task: Task) -> tuple[str, ...] | None:
    """The first way a demonstration showed one of the task's facts (the
    strings it holds), () if none did; None when the task's hops are not
    the world's relations."""
    facts = hop_facts(task.sub_questions)
    if facts is None:
      return None
    statements = [(fact,) for fact in facts]
    statements += [(s.question, s.answer) for s in task.sub_questions]
    statements.append((task.question, task.answer))
    for statement in statements:
      if statement[0] not in self._joined:  # Cheap: most are nowhere.
        continue
      if any(_shown(text, [statement]) for text in self.texts):
        return statement
    return ()

  def novel(self, task: Task) -> bool | None:
    """True: no demonstration showed a fact of the task; False: one did;
    None: the task's hops are not the world's relations."""
    shown = self.shown(task)
    return None if shown is None else not shown

  def mask(self, tasks: Sequence[Task]) -> np.ndarray:
    """[len(tasks)] bool: which are novel (unknown counts as not)."""
    return np.array([bool(self.novel(t)) for t in tasks], dtype=bool)


NOBODY = Novelty(())  # Nothing demonstrated (no warm start): all novel.
