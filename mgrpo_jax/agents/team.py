"""Builds the agent team a config describes: multi-agent or single-agent.

  multi:   main agent -> one sub-agent per kind in `agents.sub_kinds`, each
           behind its own delegation tool (a sub-agent conversation runs
           the task and its final answer comes back as the report)
           [+ reason(problem), one free-text turn of a reasoning agent
           (`agents.reason_tool`), on the first kind's model]; the kinds
           (`KINDS`):
             sub       delegate(task)  -> searches and reads, reports
             verifier  verify(claim)   -> checks a claim against the pages
  single:  one agent with search and visit itself (the single-agent GRPO
           baseline)

Each agent gets its own `sampling.Engine` (its own cache rows and weights),
so each can later receive its own trained weights (`load_weights`).

In training each kind is its own model with its own learner
(`learner.<kind>`), mesh (`mesh.<kind>`), tools (`agents.<kind>.tools`),
D_max (`align.d_max` for `sub`, `align.<kind>_d_max` for the others), store
channel (its part of each step record, `<kind>.*`, and its own published
weights) and group-relative advantages; its reward is tied to the main
agent's outcome like the searcher's. Both kinds start from the same warm
start; the verifier shares the searcher's protocol (search, visit, report)
and the oracle demonstrates the searcher only, so the tiny team calls
`verify` only once RL finds it pays. An unknown kind, a kind without
tools, two kinds on overlapping device ids and a `--role` that is not a
kind of the config are refused before any compute (tests/sub_kinds_test.py,
which also trains both kinds through the store with their own alignment).
"""

from __future__ import annotations

from typing import Any, Mapping

import dataclasses

import ml_collections

from mgrpo_jax.agents import prompts
from mgrpo_jax.agents.protocol import ToolSpec
from mgrpo_jax.agents.rollout import (DELEGATE, REASON, VERIFY, Agent,
                                      Delegation, RolloutController)
from mgrpo_jax.agents.tools import SearchBackend, ToolRegistry, search_and_visit
from mgrpo_jax.sampling.engine import Engine
from mgrpo_jax.sampling.precision import WEIGHTS_DTYPES
from mgrpo_jax.sampling.sampling_params import SamplingParams
from mgrpo_jax.sampling.shapes import Shapes

LAYOUTS = ("multi", "single")


@dataclasses.dataclass(frozen=True)
class SubKind:
  """A kind of sub-agent: its agent name (also its config sections'
  name: agents.<name>, learner.<name>, mesh.<name>), the main agent's tool
  that opens one, and its instructions (the system prompt's first part)."""
  name: str
  tool: ToolSpec
  instructions: str


KINDS = {k.name: k for k in (
    SubKind("sub", DELEGATE, prompts.SUB_ROLE),
    SubKind("verifier", VERIFY, prompts.VERIFIER_ROLE),
)}
TOOLS = ("search", "visit")  # What a sub-agent kind may be given.


def sub_kinds(config: ml_collections.ConfigDict) -> tuple[str, ...]:
  """The sub-agent kinds of the `agents` section (none for a single agent)."""
  return () if config.layout == "single" else tuple(config.sub_kinds)


def check_kinds(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError unless `sub_kinds` names distinct known kinds, each
  with a non-empty tuple of tools."""
  kinds = config.sub_kinds
  if (not isinstance(kinds, (tuple, list)) or not kinds
      or len(set(kinds)) != len(kinds)):
    raise ValueError(f"config.agents.sub_kinds={kinds!r}: expected a tuple "
                     f"of distinct sub-agent kinds, at least one, of "
                     f"{sorted(KINDS)}.")
  for kind in kinds:
    if kind not in KINDS:
      raise ValueError(f"config.agents.sub_kinds={tuple(kinds)!r}: unknown "
                       f"sub-agent kind {kind!r}; expected kinds of "
                       f"{sorted(KINDS)}.")
    tools = config[kind].tools
    if (not isinstance(tools, (tuple, list)) or not tools
        or not set(tools) <= set(TOOLS)):
      raise ValueError(f"config.agents.{kind}.tools={tools!r}: expected a "
                       f"non-empty tuple of {list(TOOLS)} (a sub-agent kind "
                       "needs a tool to work with).")


def check_agents_config(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the field when a value is unusable."""
  if config.layout not in LAYOUTS:
    raise ValueError(f"config.agents.layout={config.layout!r}: expected one of "
                     f"{list(LAYOUTS)}.")
  check_kinds(config)
  for side in ("main", *config.sub_kinds):
    section = config[side]
    for field in ("max_turns", "max_new_tokens", "context_tokens", "rows"):
      value = section[field]
      if not isinstance(value, int) or value < 1:
        raise ValueError(f"config.agents.{side}.{field}={value!r}: expected "
                         "a positive integer.")
    if section.max_new_tokens + 2 * config.answer_reserve > (
        section.context_tokens):
      raise ValueError(
          f"config.agents.{side}.context_tokens={section.context_tokens}: "
          f"expected room for a turn (max_new_tokens="
          f"{section.max_new_tokens}) and twice answer_reserve="
          f"{config.answer_reserve}.")
  for field in ("search_k", "visit_chars", "snippet_chars", "answer_reserve"):
    if not isinstance(config[field], int) or config[field] < 1:
      raise ValueError(f"config.agents.{field}={config[field]!r}: expected a "
                       "positive integer.")
  if config.prompt_style not in prompts.PROMPT_STYLES:
    raise ValueError(f"config.agents.prompt_style={config.prompt_style!r}: "
                     f"expected one of {list(prompts.PROMPT_STYLES)}.")
  if config.sampler_dtype not in WEIGHTS_DTYPES:
    raise ValueError(f"config.agents.sampler_dtype={config.sampler_dtype!r}: "
                     f"expected one of {list(WEIGHTS_DTYPES)}.")
  branches = config.get("sub_branches", 1)
  if isinstance(branches, bool) or not isinstance(branches, int) or (
      branches < 1):
    raise ValueError(f"config.agents.sub_branches={branches!r}: expected a "
                     "positive integer (1: one attempt per delegation).")
  if not 0 <= config.temperature:
    raise ValueError(f"config.agents.temperature={config.temperature!r}: "
                     "expected a number >= 0 (0 = greedy).")


def engine_shapes(runtime: ml_collections.ConfigDict | None,
                  section: ml_collections.ConfigDict) -> Shapes | None:
  """The closed shapes of an agent's sampler (its `agents.<agent>`
  section) under a run's `runtime` section (train/compiled.py); None
  (the engine's open ladders) without one or with shapes="open"."""
  if runtime is None or runtime.shapes != "closed":
    return None
  return Shapes(section.rows, section.context_tokens, closed=True,
                row_floor=runtime.decode_row_floor,
                decode_window_count=runtime.decode_windows,
                prefill_window_count=runtime.prefill_windows,
                prefill_chunk=runtime.prefill_chunk)


def _engine(model: Any, config: ml_collections.ConfigDict,
            section: ml_collections.ConfigDict,
            runtime: ml_collections.ConfigDict | None) -> Engine:
  return Engine(model, max_conversations=section.rows,
                cache_len=section.context_tokens, chunk_steps=16,
                weights_dtype=config.sampler_dtype,
                shapes=engine_shapes(runtime, section))


def _sampling(config: ml_collections.ConfigDict,
              section: ml_collections.ConfigDict) -> SamplingParams:
  return SamplingParams(temperature=config.temperature, top_p=config.top_p,
                        top_k=config.top_k,
                        max_new_tokens=section.max_new_tokens)


def build_team(config: ml_collections.ConfigDict, backend: SearchBackend, *,
               main_model: Any = None, main_tokenizer: Any,
               sub_model: Any = None, sub_tokenizer: Any = None,
               sub_models: Mapping[str, Any] | None = None,
               policies: Mapping[str, Any] | None = None,
               runtime: ml_collections.ConfigDict | None = None
               ) -> RolloutController:
  """The controller for `config` (the `agents` section of a run config).

  Each agent samples from an `Engine` over its model: the main agent's
  `main_model`; a sub-agent kind's `sub_models[kind]`, else `sub_model`,
  else the main agent's. `policies` may give an agent another `Policy` by
  name ("main", a kind; the single agent is "main"), e.g. the oracle of
  agents/oracle.py. `runtime` (a run config's section): the samplers'
  shapes, open (None) or closed (`engine_shapes`).
  """
  check_agents_config(config)
  search_tools = {t.spec.name: t for t in search_and_visit(
      backend, default_k=config.search_k,
      visit_budget_chars=config.visit_chars,
      snippet_chars=config.snippet_chars)}
  policies = dict(policies or {})
  if main_model is None and "main" not in policies:
    raise ValueError("build_team: expected main_model (or a 'main' policy).")
  main_engine = policies.get("main") or _engine(main_model, config,
                                                       config.main, runtime)
  common = dict(answer_reserve=config.answer_reserve,
                strict_format=config.strict_format,
                prompt_style=config.prompt_style)
  if config.layout == "single":
    single = Agent("single", main_engine, main_tokenizer, prompts.SINGLE_ROLE,
                   _sampling(config, config.main),
                   tools=ToolRegistry(list(search_tools.values())),
                   max_turns=config.main.max_turns,
                   first_turn_prefix=config.sub.first_turn_prefix, **common)
    return RolloutController(single)
  sub_tokenizer = main_tokenizer if sub_tokenizer is None else sub_tokenizer
  delegations, others, engines = [], [], {}
  for name in config.sub_kinds:
    kind, section = KINDS[name], config[name]
    model = (sub_models or {}).get(name) or sub_model or main_model
    engines[name] = policies.get(name) or _engine(model, config, section,
                                                  runtime)
    delegations.append(Delegation(kind.tool, name))
    others.append(Agent(
        name, engines[name], sub_tokenizer, kind.instructions,
        _sampling(config, section),
        tools=ToolRegistry([search_tools[t] for t in section.tools]),
        max_turns=section.max_turns,
        first_turn_prefix=section.first_turn_prefix, **common))
  if config.reason_tool:  # The reasoner runs on the first kind's model.
    first = config.sub_kinds[0]
    delegations.append(Delegation(REASON, "reasoner"))
    others.append(Agent("reasoner", engines[first], sub_tokenizer,
                        prompts.REASONER_ROLE, _sampling(config,
                                                         config[first]),
                        max_turns=1, free_text=True, **common))
  main = Agent("main", main_engine, main_tokenizer, prompts.MAIN_ROLE,
               _sampling(config, config.main), delegations=delegations,
               max_turns=config.main.max_turns,
               first_turn_prefix=config.main.first_turn_prefix, **common)
  return RolloutController(main, others,
                           branches=config.get("sub_branches", 1))


def agents_config() -> ml_collections.ConfigDict:
  """The default `agents` section (configs/*.py start from it)."""
  c = ml_collections.ConfigDict()
  c.layout = "multi"  # "multi": a main agent and its sub-agent kinds; "single": one agent searches (set from config.mode in training).
  c.reason_tool = False  # Give the main agent reason(problem), run on the sub-agent's model.
  c.temperature = 1.0  # Sampling temperature of every agent (0 = greedy).
  c.top_p = 1.0  # Nucleus sampling threshold (1 = off).
  c.top_k = 0  # Top-k sampling (0 = off).
  c.sampler_dtype = "float32"  # dtype of each sampler's copy of the weight matrices: "float32" (the learner's numbers) or "bfloat16" (decode ~30% faster on CPU; its log-probs differ from the learner's, corrected as stale data by learner.*.off_policy, which must not be "none").
  c.sub_branches = 1  # Sub-agent attempts per delegation from the same state (branching, for advantage.sub_group_by="branch": each delegation's attempts are one GRPO group, kept whole by the alignment: align.d_max a multiple of it; the main agent continues with the first). 1: one attempt.
  c.share_base = False  # With LoRA (learner.<agent>.lora_rank > 0 for every trained agent): agents on the same devices hold one copy of the base weights, each with its own adapters (train/adapters.py).
  c.prompt_style = "full"  # System prompts: "full" (role, tools, protocol) or "brief" (~30 ids, for models taught by SFT).
  c.strict_format = True  # One malformed turn makes a trajectory a format failure.
  c.answer_reserve = 64  # Context ids kept free for a final answer.
  c.search_k = 3  # Results per search call when the agent gives no k.
  c.visit_chars = 1200  # Characters of page text a visit returns.
  c.snippet_chars = 200  # Characters of each search hit's snippet.
  c.main = ml_collections.ConfigDict()
  c.main.max_turns = 6  # Main-agent turns before it must have answered.
  c.main.max_new_tokens = 192  # Tokens per main-agent turn.
  c.main.context_tokens = 4096  # Main-agent context budget (its cache length).
  c.main.rows = 32  # Main conversations live at once (its sampler's batch).
  c.main.first_turn_prefix = ""  # Text the first turn starts with (a scaffold for untrained models).
  c.sub = ml_collections.ConfigDict()
  c.sub.max_turns = 5  # Sub-agent turns before it must have reported.
  c.sub.max_new_tokens = 160  # Tokens per sub-agent turn.
  c.sub.context_tokens = 4096  # Sub-agent context budget (its cache length).
  c.sub.rows = 32  # Sub-agent conversations live at once.
  c.sub.first_turn_prefix = ""  # Same for the sub-agent (and the single agent, which searches).
  c.sub.tools = ("search", "visit")  # The sub-agent's tools.
  c.sub_kinds = ("sub",)  # Sub-agent kinds of the team, each its own model, learner, mesh and store channel (KINDS: "sub", "verifier").
  c.verifier = ml_collections.ConfigDict()  # The verifier kind (used when "verifier" is in sub_kinds).
  c.verifier.max_turns = 3  # Verifier turns before it must give its verdict.
  c.verifier.max_new_tokens = 160  # Tokens per verifier turn.
  c.verifier.context_tokens = 4096  # Verifier context budget (its cache length).
  c.verifier.rows = 32  # Verifier conversations live at once.
  c.verifier.first_turn_prefix = ""  # Text the verifier's first turn starts with.
  c.verifier.tools = ("search", "visit")  # The verifier's tools.
  return c
