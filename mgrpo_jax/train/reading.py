"""Whether the team reads: novel-fact accuracy and the counterfactual check.

A run's `Reading` knows which questions' facts its warm start never
demonstrated (data/novelty.py) and, with `train.counterfactual_questions`
> 0 on the generated world, a copy of the world whose last-hop facts were
changed (data/counterfactual.py) with a team that shares the run's
samplers but searches the changed pages. It adds to the metrics:

  main/novel_accuracy            a step's rollouts right, over the questions
                                 whose facts were never demonstrated
  <split>/novel_accuracy         the same of an evaluation's greedy answers
  <split>/novel_share            the share of its questions that are novel
  eval/counterfactual_follows    greedy answers on the changed pages equal
                                 to the page's new answer (a reader's)
  eval/counterfactual_recalls    equal to the old answer (a memoriser's)
  eval/counterfactual_questions  questions whose answer the change moved
"""

from __future__ import annotations

import collections
from typing import Mapping, Sequence

import jax
import numpy as np

from mgrpo_jax.agents.rewards import is_correct
from mgrpo_jax.agents.team import build_team, sub_kinds
from mgrpo_jax.data.corpus import LocalCorpus
from mgrpo_jax.data.counterfactual import counterfactual
from mgrpo_jax.data.novelty import Novelty
from mgrpo_jax.data.task import Task, TaskSet
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.runtime import processes
from mgrpo_jax.train.data import is_synthetic
from mgrpo_jax.train.evaluator import greedy, roll_out
from mgrpo_jax.train.team_build import agents_section
from mgrpo_jax.train.warm_start import novelty


def novelty_of(config, tokenizer, train: Sequence[Task],
               documents) -> Novelty:
  """The novelty of the warm start a run's config builds: its
  demonstrations of the first sft.questions of `train` (or of its
  demonstration worlds) replayed."""
  demonstrated = TaskSet("sft", tuple(train[:config.sft.questions]),
                         tuple(documents))
  return novelty(config, demonstrated, tokenizer, agents_section(config))


def reading_of(config, data, controller, tokenizer) -> "Reading":
  """The `Reading` of a run's data and team (None controller: a role that
  does not sample has only the novelty)."""
  return Reading(config, novelty_of(config, tokenizer, data.train,
                                    data.documents),
                 data.validation, controller, tokenizer,
                 agents_section(config))


def training_novelty(config, tokenizer) -> Novelty | None:
  """The novelty of a training config's warm start on its generated world
  (what `evaluate` reports novel-fact accuracy with); None for data from
  files or a config without a warm start."""
  if "sft" not in config or "world" not in config or not is_synthetic(
      config):
    return None
  world = generate_world(WorldConfig(**config.world.to_dict()))
  return novelty_of(config, tokenizer, world.splits["train"],
                    world.documents)


class Reading:
  """The run's novelty and counterfactual team (see the module docstring)."""

  def __init__(self, config, novelty: Novelty, validation: Sequence[Task],
               controller, tokenizer, agents):
    self.novelty = novelty
    self.counterfactual_tasks: tuple[Task, ...] = ()
    self.controller = None
    count = config.train.get("counterfactual_questions", 0)
    if not count or controller is None or not is_synthetic(config):
      return
    world = generate_world(WorldConfig(**config.world.to_dict()))
    tasks, documents = counterfactual(world, list(validation)[:count],
                                      seed=config.seed)
    self.counterfactual_tasks = tasks
    # The run's samplers (their weights follow the run's), other pages.
    policies = {"main": controller.main.policy,
                **{k: controller.agents[k].policy
                   for k in sub_kinds(agents) if k in controller.agents}}
    self.controller = build_team(
        agents, LocalCorpus(documents, source="counterfactual world"),
        main_tokenizer=tokenizer, policies=policies)

  def mask(self, tasks: Sequence[Task]) -> np.ndarray:
    return self.novelty.mask(tasks)

  def evaluate(self, weights: Mapping[str, float], shards) -> dict[str, float]:
    """The counterfactual figures ({} without the check)."""
    if self.controller is None or not self.counterfactual_tasks:
      return {}
    tasks = list(self.counterfactual_tasks)
    sums: collections.Counter[str] = collections.Counter()
    for shard in shards.mine:
      part = shards.tasks(tasks, shard)
      if not part:
        continue
      run = roll_out(greedy(self.controller), part, 1, jax.random.key(0),
                     weights)
      for task, row in zip(part, run.rollouts):
        answer = row[0].main.answer
        sums["questions"] += 1
        sums["follows"] += int(is_correct(answer, task))
        sums["recalls"] += int(answer is not None and is_correct(
            answer, Task(task.task_id, task.question,
                         (task.metadata["original_answer"],), task.source)))
    if processes.count() > 1:
      sums = sum((collections.Counter(c) for c in processes.gather(
          "counterfactual evaluation", dict(sums))), collections.Counter())
    n = max(sums["questions"], 1)
    return {"eval/counterfactual_follows": sums["follows"] / n,
            "eval/counterfactual_recalls": sums["recalls"] / n,
            "eval/counterfactual_questions": float(sums["questions"])}
