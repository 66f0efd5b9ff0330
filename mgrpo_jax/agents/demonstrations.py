"""Demonstrations: the team of oracles (agents/oracle.py) played through the
real rollout controller; its trajectories (token ids + loss mask) are what
the SFT warm start trains on (train/warm_start.py)."""

from __future__ import annotations

from typing import Any

import jax
import ml_collections
import numpy as np

from mgrpo_jax.agents.oracle import Knowledge, OraclePolicy
from mgrpo_jax.agents.rollout import RolloutController
from mgrpo_jax.agents.team import (agents_config, build_team,
                                   check_agents_config)
from mgrpo_jax.agents.trajectory import Rollout, Trajectory
from mgrpo_jax.data.corpus import LocalCorpus
from mgrpo_jax.data.task import TaskSet


def oracle_team(taskset: TaskSet, tokenizer: Any,
                agents: ml_collections.ConfigDict, *, noise: float = 0.0,
                early_answer: float = 0.0, lazy_report: float = 0.0,
                seed: int = 0, knowledge: Knowledge | None = None
                ) -> RolloutController:
  """The team `agents.build_team` builds for `agents` (a run's `agents`
  section), each agent played by an `OraclePolicy` instead of an Engine
  that knows `knowledge` (default: the synthetic world's play of
  `taskset`)."""
  config = agents
  check_agents_config(config)
  if config.reason_tool:
    raise ValueError("oracle_team: config.agents.reason_tool=True is not "
                     "supported (the oracle never calls reason); expected "
                     "False.")
  for side in ("main", "sub"):
    if config[side].first_turn_prefix:
      raise ValueError(f"oracle_team: config.agents.{side}.first_turn_prefix="
                       f"{config[side].first_turn_prefix!r} is not supported; "
                       "expected ''.")
  if config.layout != "single" and tuple(config.sub_kinds) != ("sub",):
    raise ValueError(f"oracle_team: config.agents.sub_kinds="
                     f"{tuple(config.sub_kinds)!r} is not supported (the "
                     "oracle plays the main agent and the 'sub' kind only); "
                     "expected ('sub',).")
  if tuple(config.sub.tools) != ("search", "visit"):
    raise ValueError(f"oracle_team: config.agents.sub.tools="
                     f"{tuple(config.sub.tools)!r} is not supported (the "
                     "oracle searches, then visits); expected "
                     "('search', 'visit').")
  knowledge = knowledge or Knowledge(taskset)

  def policy(plays: str, section: ml_collections.ConfigDict, stream: int):
    return OraclePolicy(tokenizer, knowledge, plays, noise=noise,
                        early_answer=0.0 if plays == "sub" else early_answer,
                        lazy_report=0.0 if plays == "main" else lazy_report,
                        rng=np.random.default_rng([seed, stream]),
                        max_conversations=section.rows,
                        cache_len=section.context_tokens)

  if config.layout == "single":
    policies = {"main": policy("single", config.main, 0)}
  else:
    policies = {"main": policy("main", config.main, 0),
                "sub": policy("sub", config.sub, 1)}
  return build_team(config, LocalCorpus(taskset.documents,
                                        source=taskset.name),
                    main_tokenizer=tokenizer, policies=policies)


def _config(layout: str | None, context_tokens: int | None,
            agents: ml_collections.ConfigDict | None
            ) -> ml_collections.ConfigDict:
  config = (agents_config() if agents is None
            else agents.copy_and_resolve_references())
  if layout is not None:
    config.layout = layout
  if context_tokens is not None:
    for side in ("main", "sub"):
      config[side].context_tokens = context_tokens
  return config


def oracle_rollouts(taskset: TaskSet, tokenizer: Any, *,
                    layout: str | None = None,
                    noise: float = 0.0, early_answer: float = 0.0,
                    lazy_report: float = 0.0,
                    seed: int = 0, group_size: int = 1,
                    context_tokens: int | None = None,
                    agents: ml_collections.ConfigDict | None = None,
                    knowledge: Knowledge | None = None
                    ) -> list[list[Rollout]]:
  """Rollouts [B][K] of every task of `taskset` by a team of oracles
  (arguments as `demonstrations`')."""
  controller = oracle_team(taskset, tokenizer,
                           _config(layout, context_tokens, agents),
                           noise=noise, early_answer=early_answer,
                           lazy_report=lazy_report, seed=seed,
                           knowledge=knowledge)
  return controller.run(list(taskset.tasks), group_size, jax.random.key(seed))


def demonstrations(taskset: TaskSet, tokenizer: Any, *,
                   layout: str | None = None,
                   noise: float = 0.0, early_answer: float = 0.0,
                   lazy_report: float = 0.0,
                   seed: int = 0, group_size: int = 1,
                   context_tokens: int | None = None,
                   agents: ml_collections.ConfigDict | None = None,
                   knowledge: Knowledge | None = None
                   ) -> list[Trajectory]:
  """Every trajectory (main, then its sub-agents, per rollout) the oracle
  team writes for `taskset`: the SFT warm start's data.

  Args:
    taskset: tasks with gold decompositions and their corpus.
    tokenizer: the agents' tokenizer.
    layout: "multi" (main + sub-agent) or "single" (None: the config's).
    noise: chance of a controlled mistake per turn (0: perfect play).
    early_answer: chance that a multi-hop question's demonstration answers
      after the first hop (0: never).
    lazy_report: chance per hop that the demonstration reports from the
      search results without visiting (0: never).
    seed: seeds the mistakes; same seed, same demonstrations.
    group_size: rollouts per task (differ only when noise > 0).
    context_tokens: both agents' context budget (None: the config's).
    agents: the run's `agents` config section (default `agents_config()`);
      budgets, turns and tool settings are taken from it.
    knowledge: what the oracle plays from (default `Knowledge(taskset)`,
      the synthetic world's play; `Knowledge(taskset, gold=True)` plays
      any data from its records' decompositions or supporting pages).
  """
  rows = oracle_rollouts(taskset, tokenizer, layout=layout, noise=noise,
                         early_answer=early_answer, lazy_report=lazy_report,
                         seed=seed, group_size=group_size,
                         context_tokens=context_tokens,
                         agents=agents, knowledge=knowledge)
  return [t for row in rows for r in row for t in (r.main, *r.subs)]
