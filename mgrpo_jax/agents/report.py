"""Evaluation figures of scored rollouts [B][K].

  pass@1   share of questions whose first rollout (k = 0) is correct
  avg@k    mean correctness over all K rollouts of all questions
  pass@k   share of questions with at least one correct rollout of K
  format   share of rollouts whose main agent kept the protocol
  sub_calls_per_rollout, sub_tokens_per_question, main_tokens_per_question:
           means of sub-agent calls and generated tokens
  finish/* share of main trajectories by how they ended

The same figures are given per level ("1", "2-hop", ...) and per hop count
under `by_level/<level>/...` and `by_hops/<n>/...`.
"""

from __future__ import annotations

import collections
from typing import Any, Sequence

import numpy as np

from mgrpo_jax.agents.rewards import Scores
from mgrpo_jax.agents.trajectory import Rollout
from mgrpo_jax.data.task import Task


def _figures(rows: Sequence[Sequence[Rollout]], correct: np.ndarray,
             scores: Scores, index: np.ndarray) -> dict[str, float]:
  correct = correct[index]
  k = correct.shape[1]
  main_tokens = [sum(r.main.num_generated for r in rows[b]) for b in index]
  sub_tokens = [sum(s.num_generated for r in rows[b] for s in r.subs)
                for b in index]
  finishes = collections.Counter(r.main.finish for b in index
                                 for r in rows[b])
  out = {
      "questions": float(len(index)),
      "pass@1": float(correct[:, 0].mean()),
      f"avg@{k}": float(correct.mean()),
      f"pass@{k}": float(correct.any(axis=1).mean()),
      "format": float(scores.main_format_ok[index].mean()),
      "main_reward": float(scores.main_reward[index].mean()),
      "sub_calls_per_rollout": float(scores.sub_calls[index].mean()),
      "main_tokens_per_question": float(np.mean(main_tokens)),
      "sub_tokens_per_question": float(np.mean(sub_tokens)),
  }
  total = sum(finishes.values())
  for name, count in sorted(finishes.items()):
    out[f"finish/{name}"] = count / total
  return out


def summarize(tasks: Sequence[Task], rollouts: Sequence[Sequence[Rollout]],
              scores: Scores) -> dict[str, Any]:
  """The figures of the module docstring, overall and per level / hops."""
  if not tasks:
    raise ValueError("summarize: no tasks.")
  correct = scores.main_correct.astype(np.float64)
  out: dict[str, Any] = _figures(rollouts, correct, scores,
                                 np.arange(len(tasks)))
  for attr, prefix in (("level", "by_level"), ("hops", "by_hops")):
    groups: dict[Any, list[int]] = collections.defaultdict(list)
    for b, task in enumerate(tasks):
      value = getattr(task, attr)
      if value not in (None, ""):
        groups[value].append(b)
    for value, members in sorted(groups.items(), key=lambda x: str(x[0])):
      for name, figure in _figures(rollouts, correct, scores,
                                   np.asarray(members)).items():
        if not name.startswith("finish/"):
          out[f"{prefix}/{value}/{name}"] = figure
  return out


def format_table(metrics: dict[str, Any]) -> str:
  """The overall figures as aligned text lines."""
  lines = []
  for name, value in metrics.items():
    if name.startswith("by_"):
      continue
    lines.append(f"  {name:<28} {value:.4g}")
  groups = sorted({n.rsplit("/", 1)[0] for n in metrics
                   if n.startswith("by_")})
  for group in groups:
    keys = [k for k in metrics if k.startswith(group + "/")]
    k = next(n.split("@")[1] for n in keys if "/avg@" in n)
    lines.append(f"  {group:<28} n={metrics[group + '/questions']:.0f} "
                 f"pass@1={metrics[group + '/pass@1']:.3f} "
                 f"avg@{k}={metrics[group + f'/avg@{k}']:.3f} "
                 f"sub_calls={metrics[group + '/sub_calls_per_rollout']:.2f}")
  return "\n".join(lines)
