"""Demonstrations from a file: conversations a user (or another system) wrote,
for the SFT warm start (`config.sft.demonstrations = "path/to/demos.jsonl"`).

One conversation per line (JSON Lines, or a JSON list):

  {"agent": "main",                      "main" or "sub" (a team), or
                                         "single" (mode="single")
   "user": "Who founded the employer of Ann Lee?",   the question, or the
                                         task the planner delegated
   "turns": [
     {"assistant": "I delegate. <tool_call>{\"name\": \"delegate\", ...}</tool_call>",
      "reply": "Kelo Works. Evidence: ..."},         what came back
     {"assistant": "<answer>Sam Odu</answer>"}]}     the last turn answers

Every turn but the last must be one well-formed tool call of the agent's
tools (main: delegate; sub and single: search, visit) followed by its
"reply" (the tool's output; wrapped in <tool_response name="..."> unless it
already is); the last turn must be a well-formed answer with no reply. The
conversation is rendered exactly as the rollout controller renders one: the
agent's system prompt, the user message, each turn cut at its stop string
(learned), each reply (not learned), with the controller's "answer now"
note on the reply before the agent's last allowed turn.

`read_conversations` checks a file (no tokenizer: before any compute) and
raises DataError naming the file, the line, the field and, for a turn that
does not parse, the protocol parser's message; `render` turns conversations
into trajectories; `write_conversations` writes rollouts in this schema
(e.g. the oracle's demonstrations, to start a file from).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any, Sequence

import ml_collections
import numpy as np

from mgrpo_jax.agents import prompts
from mgrpo_jax.agents.chat import ChatRenderer
from mgrpo_jax.agents.protocol import STOP_STRINGS, parse_turn
from mgrpo_jax.agents.rollout import DELEGATE, REASON
from mgrpo_jax.agents.tools import search_and_visit
from mgrpo_jax.agents.trajectory import (FINISH_ANSWER, Rollout, TurnRecord,
                                         Trajectory)
from mgrpo_jax.data.records import DataError, json_records

AGENTS = {"multi": ("main", "sub"), "single": ("single",)}
_TOOL_RESPONSE = "<tool_response"


@dataclasses.dataclass(frozen=True)
class Conversation:
  """One checked conversation of a demonstration file."""
  agent: str
  user: str
  turns: tuple[tuple[str, str | None, str | None], ...]  # (text, tool, reply)
  where: str  # "demos.jsonl, line 3", for messages.


def _specs(agent: str, agents: ml_collections.ConfigDict):
  """The agent's tools, in the order the team gives them (its system
  prompt lists them so)."""
  tools = {t.spec.name: t.spec for t in search_and_visit(None)}
  if agent == "main":
    return {DELEGATE.name: DELEGATE, **({REASON.name: REASON}
                                        if agents.reason_tool else {})}
  if agent == "single":
    return tools
  return {name: tools[name] for name in agents.sub.tools}


def _max_turns(agent: str, agents: ml_collections.ConfigDict) -> int:
  return agents.sub.max_turns if agent == "sub" else agents.main.max_turns


def read_conversations(path: str | os.PathLike,
                       agents: ml_collections.ConfigDict
                       ) -> list[Conversation]:
  """The checked conversations of a demonstration file for a team
  configured by `agents` (a run's agents section; its layout says which
  agents may appear)."""
  allowed = AGENTS["single" if agents.layout == "single" else "multi"]
  out = []
  for record in json_records(path):
    agent = record.text("agent")
    if agent not in allowed:
      raise record.error("agent", f"is {agent!r}", f"one of {list(allowed)} "
                         f"(layout {agents.layout!r})")
    user = record.text("user")
    turns = record.field("turns", (list,), "a list of turns")
    if not turns:
      raise record.error("turns", "is empty", "at least the answering turn")
    limit = _max_turns(agent, agents)
    if len(turns) > limit:
      raise record.error("turns", f"has {len(turns)} turns",
                         f"at most {limit} (the agent's max_turns)")
    specs = _specs(agent, agents)
    checked = []
    for i, value in enumerate(turns):
      turn = record.sub(f"turns[{i}]", value)
      text = turn.text("assistant")
      parsed = parse_turn(text, specs)
      last = i == len(turns) - 1
      want = "answer" if last else "tool_call"
      if parsed.kind != want or not parsed.format_ok:
        problem = (f"is a {parsed.kind}" if parsed.format_ok
                   else f"does not parse under the protocol ({parsed.error})")
        raise turn.error("assistant", problem,
                         "a well-formed final answer" if last else
                         f"one well-formed tool call of {sorted(specs)}")
      if last:
        if turn.text("reply", optional=True):
          raise turn.error("reply", "is given after the answering turn",
                           "no reply (the conversation ends with the answer)")
        checked.append((text, None, None))
      else:
        checked.append((text, parsed.name, turn.text("reply")))
    out.append(Conversation(agent, user, tuple(checked),
                            f"{record.path.name}, {record.where}"))
  return out


def _cut(text: str) -> tuple[str, bool]:
  """The turn up to its first stop string (True), else all of it."""
  ends = [text.find(s) + len(s) for s in STOP_STRINGS if s in text]
  return (text[:min(ends)], True) if ends else (text, False)


def render(conversations: Sequence[Conversation], tokenizer: Any,
           agents: ml_collections.ConfigDict) -> list[Trajectory]:
  """Each conversation as the trajectory a rollout would have recorded
  (loss mask on the assistant turns); DataError for one longer than its
  agent's context budget."""
  renderer = ChatRenderer(tokenizer)
  out = []
  for n, conv in enumerate(conversations):
    role = {"main": prompts.MAIN_ROLE, "sub": prompts.SUB_ROLE,
            "single": prompts.SINGLE_ROLE}[conv.agent]
    system = prompts.system_prompt(role, _specs(conv.agent, agents),
                                   agents.prompt_style)
    tokens = list(renderer.prompt(system, conv.user))
    mask = [False] * len(tokens)
    prompt_len, records = len(tokens), []
    limit = _max_turns(conv.agent, agents)
    for i, (text, tool, reply) in enumerate(conv.turns):
      written, stopped = _cut(text)
      generated = tokenizer.encode(written)
      if not stopped:
        generated = generated + [tokenizer.eos_id]
      tokens += generated
      mask += [True] * len(generated)
      record = TurnRecord(written, "answer" if tool is None else "tool_call",
                          True, len(generated), tool=tool)
      if reply is not None:
        content = (reply if reply.lstrip().startswith(_TOOL_RESPONSE)
                   else prompts.tool_result(tool, reply))
        if i + 1 >= limit - 1 and prompts.ANSWER_NOW not in content:
          content = f"{content}\n\n{prompts.ANSWER_NOW}"
        ids = renderer.message(generated, content)
        tokens += ids
        mask += [False] * len(ids)
        record.result = content
      records.append(record)
    section = agents.sub if conv.agent == "sub" else agents.main
    if len(tokens) > section.context_tokens:
      raise DataError(f"{conv.where}: the conversation is {len(tokens)} ids "
                      f"long; expected at most agents.{'sub' if conv.agent == 'sub' else 'main'}"
                      f".context_tokens={section.context_tokens}.")
    answer = parse_turn(conv.turns[-1][0], _specs(conv.agent, agents)).answer
    out.append(Trajectory(
        agent=conv.agent, task_id=f"demonstration-{n}", question_index=n,
        rollout_index=0, sub_index=-1, instruction=conv.user,
        tokens=np.asarray(tokens, np.int32), loss_mask=np.asarray(mask, bool),
        logprobs=np.zeros(len(tokens), np.float32), prompt_len=prompt_len,
        turns=records, answer=answer, format_ok=True, finish=FINISH_ANSWER))
  return out


def write_conversations(rollouts: Sequence[Rollout],
                        path: str | os.PathLike) -> int:
  """Writes every finished trajectory of `rollouts` (main, then its
  sub-agents) as one conversation per line; returns how many."""
  lines = []
  for rollout in rollouts:
    for trajectory in (rollout.main, *rollout.subs):
      if trajectory.finish != FINISH_ANSWER:
        continue
      turns = []
      for turn in trajectory.turns:
        entry = {"assistant": turn.text}
        if turn.result is not None and turn.kind != "answer":
          entry["reply"] = turn.result
        turns.append(entry)
      lines.append(json.dumps({"agent": trajectory.agent,
                               "user": trajectory.instruction,
                               "turns": turns}, ensure_ascii=False))
  pathlib.Path(path).write_text("".join(line + "\n" for line in lines),
                                encoding="utf-8")
  return len(lines)
