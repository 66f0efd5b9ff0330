"""What a run's team is built from: its `agents` config section and its models
(the tiny team's cached SFT warm start, or a pretrained checkpoint), each
agent's copy on its own mesh."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import ml_collections

from mgrpo_jax.agents.team import sub_kinds
from mgrpo_jax.data.world import WorldConfig
from mgrpo_jax.train.data import Data, is_synthetic


def agents_section(config) -> ml_collections.ConfigDict:
  agents = ml_collections.ConfigDict(config.agents.to_dict())
  agents.layout = "single" if config.mode == "single" else "multi"
  return agents


def build_models(config, meshes, data: Data, names: Sequence[str], *,
                 log: Callable[[str], None] = print):
  """(tokenizer, {agent name: model} for `names`, SFT figures). The model
  (the tiny one built from scratch, or a pretrained checkpoint) is
  warm-started once for the whole team by SFT on demonstrations
  (train/warm_start.py, cached on disk) and each agent gets its own copy on
  its own mesh. Without SFT (sft.steps 0), a pretrained checkpoint is every
  agent's start as it is, and tiny agent i of ["main", *sub kinds] starts
  from seed + i. A resumed run builds the warm start too: it is the frozen
  sub-agent and the KL reference."""
  from mgrpo_jax.models import build
  from mgrpo_jax.models.loading import load_model
  from mgrpo_jax.data.task import TaskSet
  from mgrpo_jax.train.warm_start import warm_started
  models: dict[str, Any] = {}
  agents = agents_section(config)
  order = ["main", *sub_kinds(agents)]
  if config.model.name != "tiny":
    if config.sft.steps == 0:
      tok = None
      for name in names:
        models[name], tok = load_model(config.model.name, mesh=meshes[name])
      return tok, models, {}
    pretrained, tok = load_model(config.model.name)
    model_config, initial = pretrained.config, lambda: pretrained
  else:
    from mgrpo_jax.agents import tiny_team
    # The generated world's tokenizer is keyed by the world's config; data
    # from files teach it their own pages and train questions.
    world, texts = WorldConfig(**config.world.to_dict()), None
    if not is_synthetic(config):
      world, texts = None, tiny_team.data_texts(data.documents, data.train)
    tok, model_config = tiny_team.tiny_team_assets(
        world, texts=texts, vocab_size=config.model.vocab_size,
        hidden_size=config.model.hidden_size,
        num_layers=config.model.num_layers,
        max_position_embeddings=max(agents[name].context_tokens
                                    for name in ["main", "sub", *order]))
    initial = None
    if config.sft.steps == 0:
      for name in names:
        models[name] = build.init_model(
            model_config, seed=config.seed + order.index(name),
            mesh=meshes[name])
      return tok, models, {}
  taskset = TaskSet("sft", data.train[:config.sft.questions],
                    data.documents)
  directory, figures = warm_started(config, taskset, tok, model_config,
                                    agents, log=log, initial=initial)
  for name in names:
    models[name] = load_model(directory, mesh=meshes[name])[0]
  return tok, models, figures
