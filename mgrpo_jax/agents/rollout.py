"""The rollout controller: B questions x K rollouts of a team of agents at once.

The main agent's conversations (one per rollout) and every sub-agent
conversation a `delegate` call opens are live at the same time. The loop
repeats: for each agent, start queued conversations while it has free cache
rows (continuous refill), then generate one turn for every one of its live
conversations that is not waiting on a sub-agent, in one batched sampler
call. Tools run on the host between calls. A delegating main conversation
waits until its sub-agent answers; the report comes back as the tool result.

Branching (`branches` > 1): a delegation opens that many sub-agent
conversations on the same instruction from the same state; the delegating
conversation waits for all of them and continues with the first one's
report. The attempts of one delegation form a clean GRPO group (AT-GRPO
and PettingLLMs form theirs so): they differ only in what the sub-agent
sampled.

Budgets end every conversation: at most `max_turns` assistant turns, and
the context budget is the sampler's `cache_len`. When the last turn is next
or the context is nearly spent, the reply carries an "answer now" message;
tool output that does not fit is cut. A conversation that ends without a
well-formed answer is a format failure (its report, for a sub-agent, says
so). Nothing waits forever: each loop generates at least one turn, and each
turn uses up budget.

The samplers are `Policy` objects: `sampling.Engine` is one; tests use a
scripted one. Several agents may share one engine; its rows are then split
between them, so a main agent waiting on a sub-agent can never hold every
row the sub-agent needs.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Protocol, Sequence

import jax
import numpy as np

from mgrpo_jax.agents import prompts
from mgrpo_jax.agents.chat import ChatRenderer
from mgrpo_jax.agents.protocol import STOP_STRINGS, ToolSpec, parse_turn
from mgrpo_jax.agents.tools import ToolRegistry
from mgrpo_jax.agents.trajectory import (FINISH_ANSWER, FINISH_CONTEXT,
                                         FINISH_TURNS, Rollout, Trajectory,
                                         TurnRecord)
from mgrpo_jax.data.task import Task
from mgrpo_jax.sampling.sampling_params import SamplingParams


class Policy(Protocol):
  """A sampler of live conversations (`sampling.Engine` implements it)."""
  max_conversations: int
  cache_len: int

  @property
  def num_free(self) -> int: ...

  def start(self, prompt_tokens: Sequence[int]) -> int: ...

  def extend(self, conv_id: int, tokens: Sequence[int]) -> None: ...

  def release(self, conv_id: int) -> None: ...

  def generate_turn(self, conv_ids: Sequence[int], params: SamplingParams,
                    key: jax.Array, *, decode_fn: Any = None) -> list[Any]: ...


@dataclasses.dataclass(frozen=True)
class Delegation:
  """A main-agent tool that runs another agent: `tool` -> `agent`."""
  tool: ToolSpec  # What the main agent calls (one string argument).
  agent: str  # Name of the agent that runs the instruction.

  @property
  def argument(self) -> str:
    return next(iter(self.tool.required))


DELEGATE = ToolSpec("delegate", {"task": "string"},
                    description="Give one sub-task to a sub-agent, which "
                    "searches and reads pages; returns its report.")
VERIFY = ToolSpec("verify", {"claim": "string"},
                  description="Have a verifier sub-agent check one claim "
                  "against the pages; returns its verdict and evidence.")
REASON = ToolSpec("reason", {"problem": "string"},
                  description="Think a problem through with a reasoning "
                  "model; returns its reasoning and result.")


@dataclasses.dataclass
class Agent:
  """One agent of the team: its sampler, tokenizer, prompt, tools, budgets."""
  name: str
  policy: Policy
  tokenizer: Any  # models.Tokenizer (encode, decode, chat template).
  instructions: str  # First paragraph of the system prompt (prompts.*_ROLE).
  sampling: SamplingParams  # max_new_tokens is the per-turn limit.
  tools: ToolRegistry = dataclasses.field(default_factory=ToolRegistry)
  delegations: Sequence[Delegation] = ()
  max_turns: int = 8  # Assistant turns before it must have answered.
  answer_reserve: int = 64  # Context ids kept free for a final answer.
  # True for a one-turn agent (a reasoner) whose whole text is its answer.
  free_text: bool = False
  # True: one malformed turn anywhere makes the trajectory format_ok=False.
  strict_format: bool = True
  # Text placed at the start of the agent's first turn, e.g.
  # '<tool_call>{"name": "delegate", "arguments": {"task": "': a scaffold
  # that lets an untrained model start the protocol. It is part of the
  # prompt (loss mask 0); the turn is parsed as prefix + generated text.
  first_turn_prefix: str = ""
  # System prompt style: "full" or "brief" (prompts.system_prompt).
  prompt_style: str = "full"

  def __post_init__(self):
    for field in ("max_turns", "answer_reserve"):
      value = getattr(self, field)
      if not isinstance(value, int) or value < 1:
        raise ValueError(f"Agent {self.name!r}: {field}={value!r}; expected "
                         "a positive integer.")
    if self.answer_reserve * 2 >= self.policy.cache_len:
      raise ValueError(
          f"Agent {self.name!r}: answer_reserve={self.answer_reserve} leaves "
          f"no room in its context budget (cache_len="
          f"{self.policy.cache_len}); expected answer_reserve < cache_len/2.")
    names = [d.tool.name for d in self.delegations]
    clash = sorted(set(names) & set(self.tools.specs()))
    if clash or len(set(names)) != len(names):
      raise ValueError(f"Agent {self.name!r}: tool names {clash or names} "
                       "are used twice (tools and delegations).")

  def specs(self) -> dict[str, ToolSpec]:
    """Every tool the agent may call, delegations included."""
    return {**self.tools.specs(), **{d.tool.name: d.tool
                                     for d in self.delegations}}

  def system_prompt(self) -> str:
    return prompts.system_prompt(self.instructions, self.specs(),
                                 self.prompt_style)


@dataclasses.dataclass(eq=False)
class _Conv:
  """A conversation's state while it runs."""
  agent: Agent
  instruction: str
  b: int
  k: int
  sub_index: int  # -1 for a main conversation.
  parent: "_Conv | None" = None
  conv_id: int | None = None
  tokens: list[int] = dataclasses.field(default_factory=list)
  mask: list[bool] = dataclasses.field(default_factory=list)
  logprobs: list[float] = dataclasses.field(default_factory=list)
  prompt_len: int = 0
  turns: list[TurnRecord] = dataclasses.field(default_factory=list)
  last_generated: list[int] = dataclasses.field(default_factory=list)
  errors: int = 0
  waiting: bool = False
  done: bool = False
  subs: list[Trajectory] = dataclasses.field(default_factory=list)
  opened: int = 0  # Sub-agent conversations this one has opened.
  branch: int = 0  # A sub-agent conversation's attempt at its delegation.
  pending: int = 0  # Attempts of the delegation being waited on.
  report: str = ""  # The first attempt's report, kept until all finish.

  def append(self, ids: Sequence[int], generated: bool,
             logprobs: Sequence[float] | None = None) -> None:
    self.tokens.extend(int(i) for i in ids)
    self.mask.extend([generated] * len(ids))
    self.logprobs.extend(logprobs if logprobs is not None
                         else [0.0] * len(ids))


class RolloutController:
  """Runs a team of agents (see the module docstring)."""

  def __init__(self, main: Agent, others: Sequence[Agent] = (), *,
               branches: int = 1):
    if isinstance(branches, bool) or not isinstance(branches, int) or (
        branches < 1):
      raise ValueError(f"RolloutController: branches={branches!r}; expected "
                       "a positive integer (1: one attempt per delegation).")
    self.branches = branches
    self.main = main
    self.agents = {main.name: main}
    for agent in others:
      if agent.name in self.agents:
        raise ValueError(f"two agents are named {agent.name!r}.")
      self.agents[agent.name] = agent
    for agent in self.agents.values():
      for d in agent.delegations:
        if d.agent not in self.agents or d.agent == agent.name:
          raise ValueError(
              f"Agent {agent.name!r}: tool {d.tool.name!r} delegates to "
              f"{d.agent!r}; expected one of the other agents "
              f"{sorted(set(self.agents) - {agent.name})}.")
        if len(d.tool.required) != 1:
          raise ValueError(f"delegation tool {d.tool.name!r} must take "
                           "exactly one required (string) argument.")
    # Agents sharing one sampler share its rows evenly.
    sharing = collections.Counter(id(a.policy) for a in self.agents.values())
    self.quota = {}
    for agent in self.agents.values():
      quota = agent.policy.max_conversations // sharing[id(agent.policy)]
      if quota < 1:
        raise ValueError(
            f"Agent {agent.name!r}: its sampler has max_conversations="
            f"{agent.policy.max_conversations} shared by "
            f"{sharing[id(agent.policy)]} agents; each needs at least one.")
      self.quota[agent.name] = quota
    self._renderers = {name: ChatRenderer(a.tokenizer)
                       for name, a in self.agents.items()}
    self._params = {name: _with_stops(a) for name, a in self.agents.items()}
    self.calls = collections.Counter()  # Sampler calls per agent (last run).

  def load_weights(self, agent: str, params: Any, version: int) -> None:
    """Gives agent `agent`'s sampler new weights (`version`: the learner's
    update count, recorded in every trajectory it samples); the one way
    trained weights reach a sampler."""
    if agent not in self.agents:
      raise ValueError(f"load_weights: no agent {agent!r}; expected one of "
                       f"{sorted(self.agents)}.")
    self.agents[agent].policy.update_weights(params, version=version)

  def precompile(self, threads: int, *, strict: bool = False
                 ) -> dict[str, tuple[int, float]]:
    """Compiles each sampler's closed set of programs (`Engine.precompile`,
    for the stop ids its agents pass), once per sampler; with `strict`
    the samplers then refuse any other shape. {first agent of a sampler:
    (programs, seconds)}; samplers without `precompile` (an oracle) are
    left out."""
    stops: dict[int, tuple[str, int]] = {}
    for name, agent in self.agents.items():
      if hasattr(agent.policy, "precompile"):
        first, count = stops.get(id(agent.policy), (name, 0))
        stops[id(agent.policy)] = (first, max(
            count, len(self._params[name].stop_token_ids)))
    out = {}
    for name, count in stops.values():
      policy = self.agents[name].policy
      out[name] = policy.precompile(count, threads=threads)
      policy.strict_shapes = strict
    return out

  def run(self, tasks: Sequence[Task], group_size: int, key: jax.Array, *,
          on_rollout: Callable[[Rollout], None] | None = None
          ) -> list[list[Rollout]]:
    """Rolls out every task `group_size` times; returns rollouts [B][K]."""
    if not tasks:
      raise ValueError("RolloutController.run: tasks is empty.")
    if not isinstance(group_size, int) or group_size < 1:
      raise ValueError(f"RolloutController.run: group_size={group_size!r}; "
                       "expected a positive integer.")
    self.calls = collections.Counter()
    self._results: list[list[Rollout | None]] = [
        [None] * group_size for _ in tasks]
    self._on_rollout = on_rollout
    self._queue = {name: collections.deque() for name in self.agents}
    self._live = {name: [] for name in self.agents}
    for b, task in enumerate(tasks):
      for k in range(group_size):
        self._queue[self.main.name].append(
            _Conv(self.main, task.question, b, k, -1))
    self._task_ids = [t.task_id for t in tasks]
    step = 0
    while any(r is None for row in self._results for r in row):
      progressed = False
      for name, agent in self.agents.items():
        progressed |= self._refill(name)
        ready = [c for c in self._live[name] if not c.waiting]
        if not ready:
          continue
        results = agent.policy.generate_turn(
            [c.conv_id for c in ready], self._params[name],
            jax.random.fold_in(key, step), decode_fn=agent.tokenizer)
        step += 1
        self.calls[name] += 1
        progressed = True
        for conv, result in zip(ready, results):
          self._after_turn(conv, result)
      if not progressed and any(r is None for row in self._results
                                for r in row):
        stuck = {n: len(q) for n, q in self._queue.items() if q}
        raise RuntimeError(f"rollout controller stalled with queued "
                           f"conversations {stuck} and none live; this is a "
                           "bug.")
    return [list(row) for row in self._results]

  # ------------------------------------------------------------- lifecycle

  def _refill(self, name: str) -> bool:
    """Starts queued conversations while rows are free; True if any left
    the queue."""
    agent = self.agents[name]
    queue, live = self._queue[name], self._live[name]
    before = len(queue)
    while (queue and len(live) < self.quota[name]
           and agent.policy.num_free > 0):
      conv = queue.popleft()
      ids = self._renderers[name].prompt(agent.system_prompt(),
                                         conv.instruction)
      if agent.first_turn_prefix:
        ids = ids + agent.tokenizer.encode(agent.first_turn_prefix)
      conv.append(ids, generated=False)
      conv.prompt_len = len(ids)
      if len(ids) + agent.answer_reserve > agent.policy.cache_len:
        self._finish(conv, None, FINISH_CONTEXT)
        continue
      conv.conv_id = agent.policy.start(ids)
      live.append(conv)
    return len(queue) != before

  def _after_turn(self, conv: _Conv, result: Any) -> None:
    agent = conv.agent
    generated = [int(t) for t in result.tokens]
    conv.append(generated, True, [float(x) for x in result.logprobs])
    conv.last_generated = generated
    if not generated:  # No room left to write anything.
      self._finish(conv, None, FINISH_CONTEXT)
      return
    text = _visible_text(agent.tokenizer, generated)
    if not conv.turns:
      text = agent.first_turn_prefix + text
    if agent.free_text:
      ok = result.finish_reason == "stop"
      conv.turns.append(TurnRecord(text, "answer", ok, len(generated)))
      conv.errors += not ok
      self._finish(conv, text.strip(), FINISH_ANSWER)
      return
    turn = parse_turn(text, agent.specs())
    record = TurnRecord(text, turn.kind, turn.format_ok, len(generated),
                        tool=turn.name, arguments=turn.arguments)
    conv.turns.append(record)
    if turn.kind == "answer":
      self._finish(conv, turn.answer, FINISH_ANSWER)
      return
    conv.errors += not turn.format_ok
    if len(conv.turns) >= agent.max_turns:
      self._finish(conv, None, FINISH_TURNS)
      return
    if turn.kind == "error":
      self._reply(conv, prompts.format_error(turn.error))
      return
    delegation = {d.tool.name: d for d in agent.delegations}.get(turn.name)
    if delegation is not None:
      record.sub_index = conv.opened
      for branch in range(self.branches):
        self._queue[delegation.agent].append(_Conv(
            self.agents[delegation.agent],
            str(turn.arguments[delegation.argument]), conv.b, conv.k,
            conv.opened, parent=conv, branch=branch))
        conv.opened += 1
      conv.waiting, conv.pending = True, self.branches
      return
    try:
      output = agent.tools.run(turn.name, turn.arguments)
    except Exception as e:  # A tool's failure is the agent's news, not ours.
      output = f"Error: {turn.name} failed ({type(e).__name__}: {e})."
    self._reply(conv, prompts.tool_result(turn.name, output))

  def _reply(self, conv: _Conv, content: str) -> None:
    """Appends a message (tool result, error, report) after the last turn,
    with "answer now" when a budget nearly runs out, cut to fit."""
    agent, renderer = conv.agent, self._renderers[conv.agent.name]
    room = agent.policy.cache_len - len(conv.tokens)
    answer_now = len(conv.turns) >= agent.max_turns - 1
    ids = renderer.message(conv.last_generated, content)
    if room - len(ids) < 2 * agent.answer_reserve:
      answer_now = True
    if answer_now:
      content = f"{content}\n\n{prompts.ANSWER_NOW}"
      ids = renderer.message(conv.last_generated, content)
    if room - len(ids) < agent.answer_reserve:
      content, ids = self._cut(conv, content, room - agent.answer_reserve)
      if ids is None:
        self._finish(conv, None, FINISH_CONTEXT)
        return
    record = conv.turns[-1]
    record.result, record.answer_now = content, answer_now
    agent.policy.extend(conv.conv_id, ids)
    conv.append(ids, generated=False)

  def _cut(self, conv: _Conv, content: str, limit: int
           ) -> tuple[str, list[int] | None]:
    """`content` shortened so its message takes at most `limit` ids."""
    renderer, tok = self._renderers[conv.agent.name], conv.agent.tokenizer
    tail = f" [cut]\n\n{prompts.ANSWER_NOW}"
    body = tok.encode(content)
    keep = limit - len(renderer.message(conv.last_generated, tail)) - 2
    while keep > 0:
      text = tok.decode(body[:keep]) + tail
      ids = renderer.message(conv.last_generated, text)
      if len(ids) <= limit:
        return text, ids
      keep -= max(1, len(ids) - limit)
    return content, None

  def _finish(self, conv: _Conv, answer: str | None, finish: str) -> None:
    agent = conv.agent
    conv.done = True
    if conv.conv_id is not None:
      agent.policy.release(conv.conv_id)
      self._live[agent.name].remove(conv)
    format_ok = finish == FINISH_ANSWER and (
        not agent.strict_format or conv.errors == 0)
    trajectory = Trajectory(
        agent=agent.name, task_id=self._task_ids[conv.b],
        question_index=conv.b, rollout_index=conv.k,
        sub_index=conv.sub_index, instruction=conv.instruction,
        tokens=np.asarray(conv.tokens, np.int32),
        loss_mask=np.asarray(conv.mask, bool),
        logprobs=np.asarray(conv.logprobs, np.float32),
        prompt_len=conv.prompt_len, turns=conv.turns,
        answer=answer if finish == FINISH_ANSWER else None,
        format_ok=format_ok, finish=finish,
        policy_version=getattr(agent.policy, "weights_version", -1),
        branch=conv.branch)
    parent = conv.parent
    if parent is None:
      rollout = Rollout(trajectory,
                        sorted(conv.subs, key=lambda s: s.sub_index))
      self._results[conv.b][conv.k] = rollout
      if self._on_rollout is not None:
        self._on_rollout(rollout)
      return
    parent.subs.append(trajectory)
    if conv.branch == 0:  # The attempt the delegating agent continues with.
      parent.report = (trajectory.answer if trajectory.answer is not None
                       else f"The {agent.name} agent stopped without a "
                       f"report ({finish.replace('_', ' ')}).")
    parent.pending -= 1
    if parent.pending:
      return
    parent.waiting = False
    tool = parent.turns[-1].tool or "delegate"
    self._reply(parent, prompts.tool_result(tool, parent.report))


def _with_stops(agent: Agent) -> SamplingParams:
  """The agent's sampling settings plus the protocol's stop ids/strings."""
  params = agent.sampling
  ids = tuple(dict.fromkeys((*params.stop_token_ids,
                             *agent.tokenizer.stop_token_ids)))
  strings = params.stop_strings
  if not agent.free_text:
    strings = tuple(dict.fromkeys((*strings, *STOP_STRINGS)))
  return dataclasses.replace(params, stop_token_ids=ids, stop_strings=strings)


def _visible_text(tokenizer: Any, generated: Sequence[int]) -> str:
  """The turn's text without a final end-of-turn token."""
  stops = set(tokenizer.stop_token_ids)
  if generated and generated[-1] in stops:
    generated = generated[:-1]
  return tokenizer.decode(generated)
