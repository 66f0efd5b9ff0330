"""A scripted, deterministic sampler for driving the rollout controller.

`ScriptedPolicy` keeps conversations the way `sampling.Engine` does (start,
extend, generate_turn, release, max_conversations/cache_len budgets) but
writes each turn with a Python function of the conversation so far. It
records every id it generated so tests can check loss masks token by token.

`team` builds a main agent that delegates to a searching sub-agent, both on
scripted samplers; the scripts and tasks here are shared by several tests.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

import numpy as np

from mgrpo_jax.agents import prompts
from mgrpo_jax.agents.protocol import render_answer, render_tool_call
from mgrpo_jax.agents.rollout import (DELEGATE, Agent, Delegation,
                                      RolloutController)
from mgrpo_jax.agents.tools import ToolRegistry, search_and_visit
from mgrpo_jax.data.task import SubQuestion, Task
from mgrpo_jax.sampling.sampling_params import SamplingParams

PARAMS = SamplingParams(temperature=0.0, max_new_tokens=256)


@dataclasses.dataclass
class ScriptedResult:
  tokens: list[int]
  logprobs: np.ndarray
  finish_reason: str
  conv_id: int | None


class ScriptedPolicy:
  """Writes turns with `script(text_so_far, turn_index) -> text`.

  Like the engine, a reply stops right after its first stop string (no
  end-of-turn id then); otherwise it ends with the end-of-turn id. Budgets follow the engine: at most
  `params.max_new_tokens` ids per turn and `cache_len` per conversation.
  """

  def __init__(self, tokenizer, script: Callable[[str, int], str], *,
               max_conversations: int = 8, cache_len: int = 2048):
    self.tokenizer = tokenizer
    self.script = script
    self.max_conversations = max_conversations
    self.cache_len = cache_len
    self.conversations: dict[int, list[int]] = {}
    self.turns: dict[int, int] = {}
    self.generated: dict[int, list[list[int]]] = {}  # conv -> turns' ids
    self.finished: dict[int, list[int]] = {}  # released conv -> tokens
    self.batch_sizes: list[int] = []
    self.max_live = 0
    self._next = 0

  @property
  def num_free(self) -> int:
    return self.max_conversations - len(self.conversations)

  def start(self, prompt_tokens):
    assert self.num_free > 0, "started more conversations than rows"
    assert len(prompt_tokens) <= self.cache_len
    conv = self._next
    self._next += 1
    self.conversations[conv] = list(prompt_tokens)
    self.turns[conv] = 0
    self.generated[conv] = []
    self.max_live = max(self.max_live, len(self.conversations))
    return conv

  def extend(self, conv, tokens):
    assert len(self.conversations[conv]) + len(tokens) <= self.cache_len
    self.conversations[conv].extend(tokens)

  def release(self, conv):
    self.finished[conv] = self.conversations.pop(conv)

  def generate_turn(self, conv_ids, params, key, *, decode_fn=None):
    del key, decode_fn
    self.batch_sizes.append(len(conv_ids))
    out = []
    for conv in conv_ids:
      tokens = self.conversations[conv]
      text = self.script(self.tokenizer.decode(tokens), self.turns[conv])
      self.turns[conv] += 1
      ends = [text.find(s) + len(s) for s in params.stop_strings if s in text]
      if ends:  # The engine stops at the first stop string, without eos.
        ids = self.tokenizer.encode(text[:min(ends)])
      else:
        ids = self.tokenizer.encode(text) + [self.tokenizer.eos_id]
      budget = min(params.max_new_tokens, self.cache_len - len(tokens))
      finish = "stop" if len(ids) <= budget else "length"
      ids = ids[:budget]
      tokens.extend(ids)
      self.generated[conv].append(ids)
      logprobs = -0.01 * np.arange(1, len(ids) + 1, dtype=np.float32)
      out.append(ScriptedResult(ids, logprobs, finish, conv))
    return out


def last_user_message(text: str) -> str:
  """The content of the conversation's first user message."""
  return re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", text, re.S)[0]


def call(name, **arguments) -> str:
  return "Let me use a tool. " + render_tool_call(name, arguments)


def answer(text) -> str:
  return "Done. " + render_answer(text)


def delegating_main_script(text, turn):
  """Question "delegate N": N delegations, then an answer."""
  n = int(re.search(r"delegate (\d+)", last_user_message(text)).group(1))
  if turn < n:
    return call("delegate", task=f"part {turn}")
  return answer(f"final after {n}")


def reporting_sub_script(text, turn):
  """Searches once, then reports on its task."""
  if turn == 0:
    return call("search", query="alpha river")
  return answer(f"report on {last_user_message(text)}")


def team(tok, corpus, main_script=delegating_main_script,
         sub_script=reporting_sub_script, *, rows=8, cache_len=2048,
         main_turns=8, sub_turns=4, shared=False, strict=True):
  """A main agent delegating to a searching sub-agent, on scripted samplers:
  (controller, main_policy, sub_policy)."""
  main_policy = ScriptedPolicy(tok, main_script, max_conversations=rows,
                               cache_len=cache_len)
  sub_policy = main_policy if shared else ScriptedPolicy(
      tok, sub_script, max_conversations=rows, cache_len=cache_len)
  if shared:  # One sampler: pick the script by the system prompt.
    main_policy.script = lambda text, turn: (
        main_script(text, turn) if prompts.MAIN_ROLE in text
        else sub_script(text, turn))
  main = Agent("main", main_policy, tok, prompts.MAIN_ROLE, PARAMS,
               delegations=[Delegation(DELEGATE, "sub")],
               max_turns=main_turns, answer_reserve=16, strict_format=strict)
  sub = Agent("sub", sub_policy, tok, prompts.SUB_ROLE, PARAMS,
              tools=ToolRegistry(search_and_visit(corpus)),
              max_turns=sub_turns, answer_reserve=16)
  return RolloutController(main, [sub]), main_policy, sub_policy


def rewards_tasks():
  """q0 (gold "Gamma", two gold steps) asks for 2 calls; q1 for 1."""
  return [Task("q0", "Where is Alpha? delegate 2", ("Gamma", "the Gamma"),
               "synthetic", sub_questions=(SubQuestion("a?", "Beta"),
                                           SubQuestion("b?", "Gamma"))),
          Task("q1", "Where is Delta? delegate 1", ("Omega",), "synthetic")]


def rewards_main_script(text, turn):
  """For `rewards_tasks`: N delegations ("step i"), then the final answer."""
  question = last_user_message(text)
  n = int(re.search(r"delegate (\d+)", question).group(1))
  if turn < n:
    return call("delegate", task=f"step {turn}")
  if "Alpha" in question:  # Right on q0; format error then wrong on q1.
    return answer("gamma")
  return "no tags" if turn == n else answer("Sigma")


def rewards_sub_script(text, turn):
  """Reports the gold step answer "Beta" on step 0, "Unknown." otherwise."""
  task = last_user_message(text)
  return answer("It is Beta." if task == "step 0" else "Unknown.")
