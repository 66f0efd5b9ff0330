"""A step's rollouts in shards: which questions each process of the main
role rolls out, with which key, and how the shards' results join.

`config.train.rollout_shards` = S (0: one per process of the role). The
step's B questions split into S consecutive ranges of B / S; shard s is
rolled out with `fold_in(rollout key, s)` (S = 1: the rollout key itself,
as before shards existed), and process p of P rolls out shards
[p S / P, (p + 1) S / P), one after another. A run's rollouts depend on S,
never on P: two processes with S = 2 sample exactly what one process with
S = 2 samples.

The shards' results join in three places:
  * scores: every process gets the whole step's (`gather_scores`, small
    arrays through runtime/processes.py) for the step's figures and the
    main agent's advantages;
  * the main batch: each shard's rows are packed into [U, M / S, T]
    columns, T from the step's longest trajectory over every process, the
    shards side by side on the micro-batch axis (`batches.main_batch`'s
    `shards`): the [U, M, T] batch holds the same rows in the same places
    whatever P; each process packs its own shards' columns and the learner
    assembles the global array from them (`Batch.local`);
  * the sub-agents' record: one store part per process, joined in process
    order (`Store.write_part`, `batches.SubRecord.concatenate`).
Evaluation splits its questions the same way (train/evaluator.py's
`evaluate(..., shards=)`), and `placement` is the line each process prints
(its devices, sampler devices and shards).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import numpy as np

from mgrpo_jax.agents.rewards import RuleExpert, Scores, score_rollouts
from mgrpo_jax.runtime import processes
from mgrpo_jax.runtime.config_checks import ConfigError

FIELD = "train.rollout_shards"


@dataclasses.dataclass(frozen=True)
class Shards:
  """The step's rollout shards and this process's share of them."""
  total: int  # S
  mine: tuple[int, ...]  # This process's shards, consecutive.
  questions: int  # B / S, questions per shard.

  @property
  def partial(self) -> bool:
    """This process holds only some shards: it packs its own rows of the
    main agent's batch (`Batch.local`)."""
    return len(self.mine) < self.total

  @property
  def first_question(self) -> int:
    """The step's index of this process's first question."""
    return self.mine[0] * self.questions

  def tasks(self, tasks: Sequence, shard: int) -> list:
    """Shard `shard`'s range of `tasks`: the step's B / S questions, or an
    evaluation's n / S (rounded, so the S ranges cover any n)."""
    n = len(tasks)
    return list(tasks[shard * n // self.total:(shard + 1) * n // self.total])

  def key(self, rollout_key: jax.Array, shard: int) -> jax.Array:
    return (rollout_key if self.total == 1
            else jax.random.fold_in(rollout_key, shard))


ONE = Shards(total=1, mine=(0,), questions=0)  # Everything in one shard.


def plan(config, num_processes: int, process: int) -> Shards:
  """The shards of `config` for process `process` of `num_processes`; a
  ConfigError naming the field when they cannot split evenly."""
  setting = config.train.rollout_shards
  if isinstance(setting, bool) or not isinstance(setting, int) or setting < 0:
    raise ConfigError(f"config.{FIELD}={setting!r}: expected an integer >= "
                      "0 (0: one shard per process of the main role).")
  total = setting or num_processes
  b = config.train.questions_per_step
  problems = []
  if total % num_processes:
    problems.append(f"a multiple of the main role's {num_processes} "
                    "processes (each rolls out whole shards)")
  if b % total:
    problems.append(f"a divisor of train.questions_per_step={b} (each shard "
                    "holds whole questions, with all their K rollouts)")
  micro = config.learner.main.micro_batch
  if micro % total:
    problems.append(f"a divisor of learner.main.micro_batch={micro} (each "
                    "shard fills its own columns of every micro-batch)")
  if problems:
    name = (f"config.{FIELD}={setting}" if setting else
            f"config.{FIELD}=0 (one shard per process: {total})")
    raise ConfigError(f"{name}: expected " + " and ".join(problems) + ".")
  per_process = total // num_processes
  return Shards(total, tuple(range(process * per_process,
                                   (process + 1) * per_process)), b // total)


def to_json(scores: Scores) -> dict[str, list]:
  """Scores as JSON: each field's values and numpy dtype."""
  return {f.name: [str(np.asarray(getattr(scores, f.name)).dtype),
                   np.asarray(getattr(scores, f.name)).tolist()]
          for f in dataclasses.fields(Scores)}


def from_json(value: dict[str, list]) -> Scores:
  return Scores(**{name: np.asarray(values, dtype)
                   for name, (dtype, values) in value.items()})


def gather_scores(name: str, scores: Scores) -> Scores:
  """The whole step's scores from every process's (its questions' ones),
  in process order; with one process, `scores` itself."""
  if processes.count() == 1:
    return scores
  parts = processes.gather(name, to_json(scores))
  return Scores.concatenate([from_json(p) for p in parts])


def kind_scores(rollouts, tasks, kind: str, weights, metrics) -> Scores:
  """The rewards of a sub-agent kind other than "sub" (hierarchical credit:
  tied to the main agent's outcome like every kind's) of this process's
  rollouts; the step's figures of that kind go into `metrics`."""
  expert = RuleExpert() if weights["v_exp"] > 0 else None
  scores = score_rollouts(rollouts, tasks, weights, expert=expert,
                          sub_agent=kind)
  step_scores = gather_scores(f"{kind} scores", scores)
  metrics[f"{kind}/calls_per_rollout"] = float(step_scores.sub_calls.mean())
  if len(step_scores.sub_reward):
    metrics[f"{kind}/reward"] = float(step_scores.sub_reward.mean())
    metrics[f"{kind}/format"] = float(step_scores.sub_format_ok.mean())
  return scores


def rollout_step(controller, tasks, group_size, key, weights, *,
                 plan: Shards | None = None, novel=None):
  """Rolls out and scores this process's shards of the step's `tasks`
  (train/shards.py; default: one shard, all of them), one after another
  (train/evaluator.py); returns (its rollouts, its scores, the whole
  step's scores, the step's rollout metrics)."""
  # Imported here: the evaluator splits its questions with Shards.
  from mgrpo_jax.train.evaluator import roll_out, rollout_figures
  plan = plan or ONE
  runs = [roll_out(controller, plan.tasks(tasks, s), group_size,
                   plan.key(key, s), weights) for s in plan.mine]
  rollouts = [row for run in runs for row in run.rollouts]
  scores = Scores.concatenate([run.scores for run in runs])
  step_scores = gather_scores("rollout scores", scores)
  generated, seconds = (sum(run.figures[f] for run in runs)
                        for f in ("generated_tokens", "seconds"))
  if processes.count() > 1:  # The step's tokens, its slowest process' time.
    every = processes.gather("rollout time", [generated, seconds])
    generated = sum(g for g, _ in every)
    seconds = max(s for _, s in every)
  f = rollout_figures(step_scores, generated, seconds)
  metrics = {
      "main/reward": f["reward"],
      "main/accuracy": f["accuracy"],
      "main/format": f["format"],
      "sub/calls_per_rollout": float(step_scores.sub_calls.mean()),
      "rollout/generated_tokens": f["generated_tokens"],
      "time/rollout": f["seconds"],
      "rollout/tokens_per_second": f["tokens_per_second"],
  }
  if novel is not None and np.any(novel):
    metrics["main/novel_accuracy"] = float(
        step_scores.main_correct[np.asarray(novel)].mean())
  if "sub_reward" in f:
    metrics["sub/reward"] = f["sub_reward"]
    metrics["sub/format"] = f["sub_format"]
  return rollouts, scores, step_scores, metrics


def placement(role: str, meshes: dict, sampler_meshes: dict,
              plan: Shards | None) -> str:
  """Where this process computes: its devices of each agent's mesh, its
  sampler devices and its rollout shards (the line each process of a role
  prints)."""
  mine = lambda mesh: sorted(d.id for d in mesh.devices.flat
                             if d.process_index == processes.index())
  parts = [f"{name} on devices {mine(mesh)} of {mesh.devices.size}"
           + (f", samples on {mine(sampler_meshes[name])}"
              if name in sampler_meshes else "")
           for name, mesh in meshes.items()]
  if plan is not None:
    last = plan.first_question + len(plan.mine) * plan.questions - 1
    parts.append(f"rolls out shard(s) {list(plan.mine)} of {plan.total} "
                 f"(questions {plan.first_question}-{last} of each step)")
  return (f"process {processes.index()} of {processes.count()} "
          f"(--role={role}): " + "; ".join(parts))
