"""Demonstration worlds: a warm start that never saw the facts it is tested on.

A warm start trained on demonstrations of the run's own train questions
shows the agents the pages of the run's world: a small model then answers
the questions whose facts it memorised and guesses the rest, and its test
accuracy measures recall, not tool use. With `config.sft.worlds = N > 0`
the warm start is trained on demonstrations of N other worlds instead:
same size, same relations, fresh random names in each (so memorising a
name never pays), `ceil(sft.questions / N)` train questions from each. The
run's world (its train, validation and test questions, its pages) is never
demonstrated: every fact the agents are trained and tested on must be read.

World i of run seed s has the seed `sft.world_seed + s * N + i` (the
seeds of a suite's runs never share a demonstration world). The tiny
tokenizer is trained on the demonstration worlds' texts too, not the run's
world: its names are as new to the tokenizer as to the model
(`name_token_lengths` measures that they are not longer for it).

`check_disjoint` runs before any compute: no fact of the run's validation
or test questions may be shown by the demonstration worlds' texts (as
data/novelty.py defines shown), and the facts of at most
`MAX_TRAIN_OVERLAP` of its train questions; a setting that lets one in is
refused, naming the fact.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from mgrpo_jax.data.novelty import Novelty
from mgrpo_jax.data.task import TaskSet
from mgrpo_jax.data.world import World, WorldConfig, generate_world

# At most this share of the train questions may have a fact demonstrated
# (validation and test: none; a question counts once any hop is shown).
MAX_TRAIN_OVERLAP = 0.10


class LeakError(ValueError):
  """A fact of the run's own questions is in the demonstrations."""


def world_configs(world: WorldConfig, *, worlds: int, questions: int,
                  first_seed: int, run_seed: int) -> list[WorldConfig]:
  """The `worlds` demonstration worlds of run seed `run_seed`, holding
  `questions` train questions between them."""
  if worlds < 1:
    raise ValueError(f"sft.worlds={worlds!r}: expected an integer >= 1 "
                     "(0: demonstrate the run's own train questions).")
  per_world = -(-questions // worlds)
  base = first_seed + run_seed * worlds
  return [dataclasses.replace(world, seed=base + i,
                              train_questions=per_world,
                              validation_questions=0, test_questions=0)
          for i in range(worlds)]


def tasksets(configs: Sequence[WorldConfig], questions: int
             ) -> list[TaskSet]:
  """One TaskSet per demonstration world (its own pages: their ids repeat
  from world to world), `questions` train questions in all."""
  out, left = [], questions
  for config in configs:
    world = generate_world(config)
    tasks = world.splits["train"][:left]
    left -= len(tasks)
    if tasks:
      out.append(TaskSet(f"demonstration world {config.seed}", tasks,
                         world.documents))
  return out


def world_texts(taskset: TaskSet) -> list[str]:
  """Everything a demonstration of `taskset` can show, one text per page
  and per question (with its decomposition and answers): search results
  and visits quote pages, conversations ask and answer the questions."""
  texts = [f"{d.title}\n{d.text}" for d in taskset.documents]
  for task in taskset.tasks:
    texts.append("\n".join([f"{task.question} {task.answer}"] + [
        f"{s.question} {s.answer}" for s in task.sub_questions]))
  return texts


def check_disjoint(world: World, demonstrated: Sequence[TaskSet], *,
                   setting: str) -> dict[str, float]:
  """Refuses (LeakError naming the fact) a demonstration of a validation or
  test fact of `world`, or of more than MAX_TRAIN_OVERLAP of its train
  questions; returns each split's share of questions whose facts the
  demonstration worlds show (data/novelty.py). `setting` names the config
  fields that chose the demonstrations."""
  novelty = Novelty([t for tasks in demonstrated for t in world_texts(tasks)])
  shares = {}
  for split in ("test", "validation", "train"):
    seen = 0
    for task in world.splits[split]:
      shown = novelty.shown(task)
      if not shown:
        continue
      seen += 1
      if split != "train":
        raise LeakError(
            f"{setting}: the {split} fact {' '.join(shown)!r} (question "
            f"{task.task_id!r}) is in the warm start's demonstrations; "
            "expected demonstration worlds that share no fact with the "
            "run's world (a different sft.world_seed, or world.seed "
            "outside the demonstration worlds' seeds).")
    shares[split] = seen / max(len(world.splits[split]), 1)
  if shares["train"] > MAX_TRAIN_OVERLAP:
    raise LeakError(f"{setting}: {shares['train']:.0%} of the train "
                    "questions' facts are in the warm start's "
                    f"demonstrations; expected at most "
                    f"{MAX_TRAIN_OVERLAP:.0%}.")
  return shares


def name_token_lengths(tokenizer, worlds: Sequence[World]) -> float:
  """Mean ids per entity name (with its leading space, as a sentence
  writes it) over `worlds`."""
  lengths = [len(tokenizer.encode(" " + e.name)) for w in worlds
             for e in w.entities]
  return float(np.mean(lengths))

