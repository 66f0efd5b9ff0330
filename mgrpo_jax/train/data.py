"""The trainer's questions: the train split in a fixed order per epoch, the
validation and held-out test questions, and the corpus the tools search."""

from __future__ import annotations

import dataclasses

import numpy as np

from mgrpo_jax.data.corpus import LocalCorpus
from mgrpo_jax.data.loading import load_tasks
from mgrpo_jax.data.task import Task
from mgrpo_jax.data.world import WorldConfig


@dataclasses.dataclass
class Data:
  """The train questions (shuffled per epoch), validation, the corpus, and
  the held-out test questions (train.test_questions; never used for a
  choice: only logged)."""
  train: list[Task]
  validation: list[Task]
  backend: LocalCorpus
  seed: int
  test: list[Task] = dataclasses.field(default_factory=list)

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


def load_data(config) -> Data:
  world = WorldConfig(**config.world.to_dict())
  train = load_tasks("synthetic", split="train", world=world)
  validation = load_tasks("synthetic", split="validation", world=world,
                          limit=config.train.eval_questions)
  test = (load_tasks("synthetic", split="test", world=world,
                     limit=config.train.test_questions).tasks
          if config.train.test_questions else [])
  return Data(list(train.tasks), list(validation.tasks),
              LocalCorpus(train.documents, source="synthetic world"),
              config.seed, list(test))
