"""Rewards of finished rollouts (METHOD.md), from trajectories to arrays.

  main:  R_M = format_ok * (w_fmt + w_cor * correct)            [B, K]
  sub:   R_S = sub_format_ok * (v_fmt + v_main * correct_M(k)
                                + v_exp * expert_i)            per sub call

`score_rollouts` turns a batch of finished rollouts into these rewards (the
sub-agent's tied to its rollout's main outcome, with an optional expert
score). `correct` is a normalised exact match (GAIA's rules) against any of
the task's accepted answers; `correct_fn` swaps in another checker (an LLM
judge). `expert_i` scores one sub-agent report: `RuleExpert` on tasks with a
gold decomposition (synthetic world, MuSiQue), `ModelJudge` with a local
model, or any object with the `Expert` interface.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Protocol, Sequence

import jax
import numpy as np

from mgrpo_jax.agents.trajectory import Rollout
from mgrpo_jax.core import rewards as core_rewards
from mgrpo_jax.core.scoring import normalized_match
from mgrpo_jax.data.task import Task
from mgrpo_jax.sampling.sampling_params import SamplingParams


def is_correct(answer: str | None, task: Task) -> bool:
  """The answer matches one of the task's accepted answers."""
  return answer is not None and any(normalized_match(answer, gold)
                                    for gold in task.answers)


@dataclasses.dataclass(frozen=True)
class ExpertItem:
  """What an expert scores: a delegated instruction and the report."""
  task: Task  # The question the rollout answers.
  instruction: str  # What the main agent asked the sub-agent.
  report: str | None  # The sub-agent's report (None: it never reported).


class Expert(Protocol):
  """Scores sub-agent reports in [0, 1]; batched."""

  def __call__(self, items: Sequence[ExpertItem]) -> list[float]: ...


def _normalise(text: str) -> str:
  return " ".join(re.findall(r"\w+", text.lower()))


class RuleExpert:
  """1 when the report states the gold answer of a step of the question's
  decomposition (or the final answer), 0 otherwise; needs tasks with
  `sub_questions` (synthetic world, MuSiQue); others score 0."""

  def __call__(self, items: Sequence[ExpertItem]) -> list[float]:
    scores = []
    for item in items:
      if not item.report:
        scores.append(0.0)
        continue
      report = f" {_normalise(item.report)} "
      golds = [s.answer for s in item.task.sub_questions] + list(
          item.task.answers)
      hit = any(_normalise(g) and f" {_normalise(g)} " in report
                for g in golds)
      scores.append(float(hit))
    return scores


JUDGE_PROMPT = (
    "You check a research assistant's report.\n"
    "Question being researched: {question}\n"
    "Sub-task given to the assistant: {instruction}\n"
    "Reference answer to the question: {reference}\n"
    "Report: {report}\n"
    "Does the report correctly and usefully answer the sub-task? "
    "Reply with yes or no.")


class ModelJudge:
  """An LLM judge on a local model: yes -> 1, no (or anything else) -> 0.

  `engine` is a `sampling.Engine` (or any object with its `generate`),
  `tokenizer` the model's tokenizer; one batched greedy call per batch.
  """

  def __init__(self, engine: Any, tokenizer: Any, *,
               prompt: str = JUDGE_PROMPT, max_new_tokens: int = 8,
               seed: int = 0):
    self.engine, self.tokenizer, self.prompt = engine, tokenizer, prompt
    self.params = SamplingParams(
        temperature=0.0, max_new_tokens=max_new_tokens,
        stop_token_ids=tuple(tokenizer.stop_token_ids))
    self.key = jax.random.key(seed)

  def __call__(self, items: Sequence[ExpertItem]) -> list[float]:
    scores = [0.0] * len(items)
    asked = [i for i, item in enumerate(items) if item.report]
    if not asked:
      return scores
    prompts = []
    for i in asked:
      item = items[i]
      text = self.prompt.format(question=item.task.question,
                                instruction=item.instruction,
                                reference=item.task.answer,
                                report=item.report)
      prompts.append(self.tokenizer.encode(self.tokenizer.apply_chat_template(
          [{"role": "user", "content": text}])))
    results = self.engine.generate(prompts, self.params, self.key)
    for i, result in zip(asked, results):
      reply = self.tokenizer.decode(result.tokens, skip_special_tokens=True)
      scores[i] = float(reply.strip().lower().startswith("yes"))
    return scores


@dataclasses.dataclass
class Scores:
  """Rewards of a batch of rollouts [B][K] and their sub-agent calls.

  Sub-agent arrays are flat over every sub trajectory of `sub_agent`, in
  (b, k, sub order) order; `sub_b`, `sub_k` and `sub_i` link each to its
  rollout.
  """
  main_reward: np.ndarray  # float32 [B, K]
  main_correct: np.ndarray  # bool [B, K]
  main_format_ok: np.ndarray  # bool [B, K]
  sub_calls: np.ndarray  # int32 [B, K]: sub trajectories of each rollout.
  sub_b: np.ndarray  # int32 [N]
  sub_k: np.ndarray  # int32 [N]
  sub_i: np.ndarray  # int32 [N]: the sub trajectory's index in rollout.subs.
  sub_reward: np.ndarray  # float32 [N]
  sub_format_ok: np.ndarray  # bool [N]
  sub_expert: np.ndarray  # float32 [N] (0 without an expert)

  @classmethod
  def concatenate(cls, parts: Sequence["Scores"]) -> "Scores":
    """The scores of consecutive question ranges' rollouts as one (e.g.
    the shards of a step): rows one after another, each sub-agent call's
    `sub_b` shifted by the questions before its part."""
    if len(parts) == 1:
      return parts[0]
    first_b = np.cumsum([0] + [len(p.main_reward) for p in parts])
    joined = {f.name: np.concatenate([getattr(p, f.name) for p in parts])
              for f in dataclasses.fields(cls)}
    joined["sub_b"] = np.concatenate(
        [p.sub_b + first_b[i] for i, p in enumerate(parts)]).astype(
            parts[0].sub_b.dtype)
    return cls(**joined)


def score_rollouts(rollouts: Sequence[Sequence[Rollout]],
                   tasks: Sequence[Task], weights: dict[str, float], *,
                   sub_agent: str = "sub", expert: Expert | None = None,
                   correct_fn: Callable[[str | None, Task], bool] = is_correct,
                   ) -> Scores:
  """Scores rollouts [B][K] of `tasks` with reward `weights` (a preset's,
  see `core.rewards.reward_weights`)."""
  if len(rollouts) != len(tasks):
    raise ValueError(f"score_rollouts: {len(rollouts)} rows of rollouts for "
                     f"{len(tasks)} tasks; expected one row per task.")
  if weights.get("v_exp", 0.0) > 0 and expert is None:
    raise ValueError(f"score_rollouts: v_exp={weights['v_exp']} > 0 needs an "
                     "expert (RuleExpert, ModelJudge, ...).")
  main_w = {k: weights[k] for k in core_rewards.MAIN_KEYS}
  sub_w = {k: weights[k] for k in core_rewards.SUB_KEYS}
  correct = np.array([[correct_fn(r.main.answer, task) for r in row]
                      for row, task in zip(rollouts, tasks)], bool)
  format_ok = np.array([[r.main.format_ok for r in row] for row in rollouts],
                       bool)
  main = np.asarray(core_rewards.main_reward(format_ok, correct, **main_w))
  links, items = [], []
  calls = np.zeros(correct.shape, np.int32)
  for b, (row, task) in enumerate(zip(rollouts, tasks)):
    for k, rollout in enumerate(row):
      for i, sub in enumerate(rollout.subs):
        if sub.agent != sub_agent:
          continue
        calls[b, k] += 1
        links.append((b, k, i, sub.format_ok))
        items.append(ExpertItem(task, sub.instruction, sub.answer))
  link = np.array([l[:3] for l in links], np.int32).reshape(-1, 3)
  sub_ok = np.array([l[3] for l in links], bool)
  expert_scores = np.asarray(expert(items) if (expert and items) else
                             np.zeros(len(items)), np.float32)
  # The number of calls M changes every step: padded to a power of two (the
  # reward is elementwise), so the jitted math compiles once per bucket.
  m = len(sub_ok)
  sub = np.asarray(core_rewards.sub_reward(
      _padded(sub_ok, m), _padded(correct[link[:, 0], link[:, 1]], m),
      _padded(expert_scores, m), **sub_w))[:m]
  return Scores(main.astype(np.float32), correct, format_ok, calls,
                link[:, 0], link[:, 1], link[:, 2], sub.astype(np.float32),
                sub_ok, expert_scores)


def _padded(x_M: np.ndarray, m: int) -> np.ndarray:
  """`x_M` zero-padded to the smallest power of two >= max(m, 16)."""
  size = 16
  while size < m:
    size *= 2
  return np.pad(x_M, (0, size - m))
