"""What a rollout produces: per-agent token trajectories and their links.

One rollout of question q (rollout index k) yields one main trajectory and
d >= 0 sub-agent trajectories (one per delegation, in the order they were
opened). Each trajectory holds the conversation's ids, a loss mask that is
1 exactly on the ids that agent generated, and the log-probability the
sampler gave each generated id (0 elsewhere), and its links: task id,
question index, rollout index and sub index (-1 for the main trajectory),
with the weight version that sampled it. `turns` keeps the readable
transcript: what the agent wrote, what it asked for, and what came back.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

# Why a conversation ended.
FINISH_ANSWER = "answer"  # It gave a well-formed final answer.
FINISH_TURNS = "turn_limit"  # It used all its turns without answering.
FINISH_CONTEXT = "context_limit"  # Its context budget ran out.


@dataclasses.dataclass
class TurnRecord:
  """One assistant turn and the controller's reply."""
  text: str  # What the agent generated (decoded).
  kind: str  # "tool_call", "answer" or "error" (protocol.Turn.kind).
  format_ok: bool
  num_tokens: int  # Generated ids in this turn.
  tool: str | None = None  # Tool called, if any.
  arguments: dict[str, Any] | None = None
  result: str | None = None  # Text sent back (tool output / error / report).
  sub_index: int | None = None  # The sub-agent trajectory a delegation opened.
  answer_now: bool = False  # The reply carried the "answer now" message.

  def to_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass
class Trajectory:
  """One agent's conversation in a rollout."""
  agent: str  # Agent name: "main", "sub", "reasoner", "single", ...
  task_id: str  # The question this rollout answers.
  question_index: int  # Index of the question in the batch (b).
  rollout_index: int  # k, in [0, K).
  sub_index: int  # -1 for the main trajectory; else the delegation's index.
  instruction: str  # The user message: the question, or the delegated task.
  tokens: np.ndarray  # int32 [T]
  loss_mask: np.ndarray  # bool [T]: True where this agent generated the id.
  logprobs: np.ndarray  # float32 [T]: sampling log-prob, 0 where not generated.
  prompt_len: int  # Ids of the initial prompt.
  turns: list[TurnRecord]
  answer: str | None  # Final answer / report (None when it never answered).
  format_ok: bool  # Answered, and (strict format) no turn broke the protocol.
  finish: str  # FINISH_ANSWER, FINISH_TURNS or FINISH_CONTEXT.
  policy_version: int = -1  # Weight version that sampled it (-1: unknown).
  # Which attempt at its delegation (the controller's `branches`; the
  # delegating agent continued with attempt 0's report).
  branch: int = 0

  @property
  def num_generated(self) -> int:
    return int(self.loss_mask.sum())

  def to_json(self, *, with_tokens: bool = False) -> dict[str, Any]:
    out = {k: getattr(self, k) for k in (
        "agent", "task_id", "question_index", "rollout_index", "sub_index",
        "instruction", "prompt_len", "answer", "format_ok", "finish",
        "policy_version", "branch")}
    out["num_tokens"] = int(self.tokens.shape[0])
    out["num_generated"] = self.num_generated
    out["turns"] = [t.to_json() for t in self.turns]
    if with_tokens:
      out["tokens"] = self.tokens.tolist()
      out["loss_mask"] = self.loss_mask.astype(int).tolist()
      out["logprobs"] = self.logprobs.tolist()
    return out


@dataclasses.dataclass
class Rollout:
  """One rollout: the main trajectory and the sub-agent ones it opened."""
  main: Trajectory
  subs: list[Trajectory]  # In delegation order; sub_index = position.

  def sub_trajectories(self, agent: str) -> list[Trajectory]:
    """The sub trajectories of one sub-agent kind."""
    return [s for s in self.subs if s.agent == agent]

  def to_json(self, *, with_tokens: bool = False) -> dict[str, Any]:
    """The transcript: main turns, each delegation's sub-agent nested."""
    out = self.main.to_json(with_tokens=with_tokens)
    subs = {s.sub_index: s.to_json(with_tokens=with_tokens)
            for s in self.subs}
    for turn in out["turns"]:
      if turn["sub_index"] is not None:
        turn["sub_agent"] = subs.get(turn["sub_index"])
    return out
