"""The one evaluator: roll a team out on questions, score, report figures.

Used by the trainer (training rollouts and validation / test figures), the
SFT warm start's study (bench/sft_study.py), `python -m mgrpo_jax.evaluate`
and the rollout benchmark, so a figure means the same in all of them:

  accuracy        share of rollouts whose main answer is right (is_correct)
  format          share whose main trajectory is well-formed
  sub_calls       delegations per rollout (every sub-agent kind)
  sub_format      share of sub-agent reports that are well-formed
  sub_expert      share of reports the expert credits (with an expert)
  generated_tokens, seconds, tokens_per_second

`roll_out` is the primitive (any K, any temperature, a callback per finished
rollout); `evaluate` is the trainer's validation: one greedy rollout per
question (and, with `samples`, that many at the training temperature), plus
the per-agent diagnostics of agents/diagnostics.py.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np

from mgrpo_jax.agents.diagnostics import (Grader, diagnostic_counts,
                                         diagnostic_figures)
from mgrpo_jax.agents.rewards import RuleExpert, Scores, score_rollouts
from mgrpo_jax.agents.rollout import RolloutController
from mgrpo_jax.agents.trajectory import Rollout
from mgrpo_jax.core.rewards import reward_weights
from mgrpo_jax.data.novelty import Novelty
from mgrpo_jax.data.task import Task
from mgrpo_jax.runtime import processes
from mgrpo_jax.train.shards import ONE, Shards


def weights_of(reward: Mapping[str, Any]) -> dict[str, float]:
  """The reward weights a config's `reward` section names: its preset with
  every field that is not None overriding the preset's value."""
  reward = dict(reward)
  return reward_weights(reward.pop("preset"), **{
      k: v for k, v in reward.items() if v is not None})


def greedy(controller: RolloutController) -> RolloutController:
  """The same team on the same samplers, decoding greedily."""
  def cold(agent):
    return dataclasses.replace(agent, sampling=dataclasses.replace(
        agent.sampling, temperature=0.0))

  return RolloutController(cold(controller.main), [
      cold(a) for name, a in controller.agents.items()
      if name != controller.main.name])


@dataclasses.dataclass
class Outcome:
  """What `roll_out` returns: rollouts [B][K], their scores, the figures."""
  rollouts: list[list[Rollout]]
  scores: Scores
  figures: dict[str, float]


def roll_out(controller: RolloutController, tasks: Sequence[Task],
             group_size: int, key: jax.Array, weights: Mapping[str, float], *,
             sub_agent: str = "sub",
             on_rollout: Callable[[Rollout], None] | None = None) -> Outcome:
  """Rolls every task out `group_size` times and scores the rollouts with
  reward `weights` (a rule expert grades reports when v_exp > 0)."""
  tasks = list(tasks)
  start = time.perf_counter()
  rollouts = controller.run(tasks, group_size, key, on_rollout=on_rollout)
  seconds = time.perf_counter() - start
  expert = RuleExpert() if weights["v_exp"] > 0 else None
  scores = score_rollouts(rollouts, tasks, dict(weights), expert=expert,
                          sub_agent=sub_agent)
  flat = [r for row in rollouts for r in row]
  generated = sum(t.num_generated for r in flat for t in (r.main, *r.subs))
  figures = rollout_figures(scores, generated, seconds)
  # Every sub-agent kind's calls (scores count `sub_agent`'s alone).
  figures["sub_calls"] = float(np.mean([len(r.subs) for r in flat]))
  return Outcome(rollouts, scores, figures)


def rollout_figures(scores: Scores, generated: float, seconds: float
                    ) -> dict[str, float]:
  """The figures of scored rollouts that sampled `generated` ids in
  `seconds`."""
  figures = {
      "reward": float(scores.main_reward.mean()),
      "accuracy": float(scores.main_correct.mean()),
      "format": float(scores.main_format_ok.mean()),
      "sub_calls": float(scores.sub_calls.mean()),
      "generated_tokens": float(generated),
      "seconds": seconds,
      "tokens_per_second": generated / max(seconds, 1e-9),
  }
  if len(scores.sub_reward):
    figures["sub_reward"] = float(scores.sub_reward.mean())
    figures["sub_format"] = float(scores.sub_format_ok.mean())
    figures["sub_expert"] = float(scores.sub_expert.mean())
  return figures


def evaluate(controller: RolloutController, tasks: Sequence[Task],
             samples: int = 0, *, grader: Grader | None = None,
             prefix: str = "eval",
             weights: Mapping[str, float] | None = None,
             outcomes: dict[str, int] | None = None,
             sampled_outcomes: dict[str, list[int]] | None = None,
             shards: Shards = ONE,
             novelty: Novelty | None = None) -> dict[str, float]:
  """Validation figures, named `<prefix>/<figure>`: one greedy rollout per
  question (accuracy, format, sub_calls; with a `grader`, the per-agent
  diagnostics on those rollouts) and, with `samples` > 0, that many rollouts
  per question at the training temperature (sampled_accuracy,
  sampled_format: the expected reward terms the policy gradient climbs;
  with a `grader`, the diagnostics on them too, sampled_<figure>).
  The keys are the same at every evaluation, so two evaluations differ only
  through the weights; `time/<prefix>` is the seconds taken. A dict given
  as `outcomes` receives task id -> 1 / 0, whether the greedy rollout of
  that question was right (for question-level paired tests), and one given
  as `sampled_outcomes` task id -> 1 / 0 for each of its `samples` sampled
  rollouts (the same tests on what GRPO climbs). With a
  `novelty` (data/novelty.py): novel_accuracy, over the questions whose
  facts the warm start never demonstrated, and their share, novel_share.

  `shards`: the questions split into S consecutive ranges, each evaluated
  on its own (sampled ones with `shards.key`), as the rollouts of a step
  are (train/shards.py); the processes of a role each evaluate theirs and
  the figures are the whole list's, in every process."""
  start = time.perf_counter()
  weights = weights or reward_weights("mgrpo")
  tasks = list(tasks)
  sums: collections.Counter[str] = collections.Counter()
  right: dict[str, int] = {}
  sampled_right: dict[str, list[int]] = {}
  for shard in shards.mine:
    part = shards.tasks(tasks, shard)
    if not part:
      continue
    greedy_run = roll_out(greedy(controller), part, 1, jax.random.key(0),
                          weights)
    scores = greedy_run.scores
    sums.update({"questions": len(part),
                 "correct": int(scores.main_correct.sum()),
                 "format": int(scores.main_format_ok.sum()),
                 "subs": sum(len(r.subs) for row in greedy_run.rollouts
                             for r in row)})
    right.update({t.task_id: int(c) for t, c in zip(
        part, scores.main_correct[:, 0])})
    if novelty is not None:
      novel = novelty.mask(part)
      sums.update({"novel": int(novel.sum()), "novel_correct": int(
          scores.main_correct[novel, 0].sum())})
    if grader is not None:
      sums.update({f"diagnostic/{k}": v for k, v in diagnostic_counts(
          greedy_run.rollouts, part, grader).items()})
    if samples:
      sampled_run = roll_out(controller, part, samples,
                             shards.key(jax.random.key(1), shard), weights)
      sampled = sampled_run.scores
      if grader is not None:
        sums.update({f"sampled_diagnostic/{k}": v for k, v in
                     diagnostic_counts(sampled_run.rollouts, part,
                                       grader).items()})
      sums.update({"sampled": sampled.main_correct.size,
                   "sampled_correct": int(sampled.main_correct.sum()),
                   "sampled_format": int(sampled.main_format_ok.sum())})
      sampled_right.update({t.task_id: [int(c) for c in row] for t, row in
                            zip(part, sampled.main_correct)})
  if processes.count() > 1:  # Every process's questions.
    every = processes.gather(f"{prefix} evaluation",
                             [dict(sums), right, sampled_right])
    sums = sum((collections.Counter(c) for c, _, _ in every),
               collections.Counter())
    right = {k: v for _, r, _ in every for k, v in r.items()}
    sampled_right = {k: v for _, _, r in every for k, v in r.items()}
  if outcomes is not None:
    outcomes.update({t.task_id: right[t.task_id] for t in tasks})
  if sampled_outcomes is not None and samples:
    sampled_outcomes.update({t.task_id: sampled_right[t.task_id]
                             for t in tasks})
  n = max(sums["questions"], 1)
  out = {"accuracy": sums["correct"] / n, "format": sums["format"] / n,
         "sub_calls": sums["subs"] / n}
  if sums["novel"]:
    out["novel_accuracy"] = sums["novel_correct"] / sums["novel"]
  if novelty is not None:
    out["novel_share"] = sums["novel"] / n
  if grader is not None:
    out.update(diagnostic_figures({k[len("diagnostic/"):]: v
                                   for k, v in sums.items()
                                   if k.startswith("diagnostic/")}))
  if samples:
    out["sampled_accuracy"] = sums["sampled_correct"] / sums["sampled"]
    out["sampled_format"] = sums["sampled_format"] / sums["sampled"]
    if grader is not None:  # The same diagnostics on the sampled rollouts.
      out.update({f"sampled_{k}": v for k, v in diagnostic_figures(
          {k[len("sampled_diagnostic/"):]: v for k, v in sums.items()
           if k.startswith("sampled_diagnostic/")}).items()})
  out = prefixed(prefix, out)
  out[f"time/{prefix}"] = time.perf_counter() - start
  return out


def prefixed(prefix: str, metrics: Mapping[str, float]) -> dict[str, float]:
  return {f"{prefix}/{k}": v for k, v in metrics.items()}
