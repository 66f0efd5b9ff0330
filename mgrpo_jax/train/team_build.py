"""What a run's team is built from: its `agents` config section and its models
(the tiny team's cached SFT warm start, or a pretrained checkpoint), each
agent's copy on its own mesh."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import ml_collections

from mgrpo_jax.agents.team import sub_kinds
from mgrpo_jax.data.world import WorldConfig
from mgrpo_jax.train.data import Data


def agents_section(config) -> ml_collections.ConfigDict:
  agents = ml_collections.ConfigDict(config.agents.to_dict())
  agents.layout = "single" if config.mode == "single" else "multi"
  return agents


def build_models(config, meshes, data: Data, names: Sequence[str], *,
                 log: Callable[[str], None] = print):
  """(tokenizer, {agent name: model} for `names`, SFT figures). The tiny
  model is warm-started once for the whole team (train/warm_start.py,
  cached on disk) and each agent gets its own copy on its own mesh (no SFT
  with sft.steps 0: agent i of ["main", *sub kinds] starts from seed + i). A
  resumed run builds the warm start too: it is the frozen sub-agent and the
  KL reference."""
  from mgrpo_jax.models import build
  from mgrpo_jax.models.loading import load_model
  models: dict[str, Any] = {}
  if config.model.name != "tiny":
    tok = None
    for name in names:
      models[name], tok = load_model(config.model.name, mesh=meshes[name])
    return tok, models, {}
  from mgrpo_jax.agents import tiny_team
  from mgrpo_jax.data.task import TaskSet
  from mgrpo_jax.train.warm_start import warm_started
  world = WorldConfig(**config.world.to_dict())
  agents = agents_section(config)
  order = ["main", *sub_kinds(agents)]
  tok, model_config = tiny_team.tiny_team_assets(
      world, vocab_size=config.model.vocab_size,
      hidden_size=config.model.hidden_size,
      num_layers=config.model.num_layers,
      max_position_embeddings=max(agents[name].context_tokens
                                  for name in ["main", "sub", *order]))
  if config.sft.steps == 0:
    for name in names:
      models[name] = build.init_model(
          model_config, seed=config.seed + order.index(name),
          mesh=meshes[name])
    return tok, models, {}
  taskset = TaskSet("sft", data.train[:config.sft.questions],
                    data.backend.documents)
  directory, figures = warm_started(config, taskset, tok, model_config,
                                    agents, log=log)
  for name in names:
    models[name] = load_model(directory, mesh=meshes[name])[0]
  return tok, models, figures
