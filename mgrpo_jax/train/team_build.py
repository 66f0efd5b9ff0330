"""What a run's team is built from: its `agents` config section and its models
(the tiny team's cached SFT warm start, or a pretrained checkpoint), each
agent's copy on its own mesh."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import ml_collections

from mgrpo_jax.agents.team import sub_kinds
from mgrpo_jax.runtime import processes
from mgrpo_jax.data.world import WorldConfig
from mgrpo_jax.train.data import Data, is_synthetic


def agents_section(config) -> ml_collections.ConfigDict:
  agents = ml_collections.ConfigDict(config.agents.to_dict())
  agents.layout = "single" if config.mode == "single" else "multi"
  return agents


def build_models(config, meshes, data: Data, names: Sequence[str], *,
                 log: Callable[[str], None] = print, store=None):
  """`_build_models`, then a note for each parameter axis a mesh could not
  shard by the rules (models/sharding.py: replicated instead)."""
  from flax import nnx
  from mgrpo_jax.models import sharding
  tok, models, figures = _build_models(config, meshes, data, names, log=log,
                                       store=store)
  for name, model in models.items():
    if meshes.get(name) is not None:
      for line in sharding.undivided(nnx.split(model)[1], meshes[name]):
        log(f"note: {name}'s {line}")
  return tok, models, figures


def _build_models(config, meshes, data: Data, names: Sequence[str], *,
                  log: Callable[[str], None] = print, store=None):
  """(tokenizer, {agent name: model} for `names`, SFT figures). The model
  (the tiny one built from scratch, or a pretrained checkpoint) is
  warm-started once for the whole team by SFT on demonstrations
  (train/warm_start.py, cached on disk) and each agent gets its own copy on
  its own mesh. Without SFT (sft.steps 0), a pretrained checkpoint is every
  agent's start as it is, and tiny agent i of ["main", *sub kinds] starts
  from seed + i. A resumed run builds the warm start too: it is the frozen
  sub-agent and the KL reference. A role over several processes trains
  the warm start once, in process 0, and shares it through `store`
  (`_shared_warm_start`)."""
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
    from mgrpo_jax.train.warm_start import tokenizer_texts
    world, texts = WorldConfig(**config.world.to_dict()), None
    if not is_synthetic(config):
      world, texts = None, tiny_team.data_texts(data.documents, data.train)
    elif config.sft.get("worlds", 0):  # The demonstration worlds'.
      world, texts = None, tokenizer_texts(config)
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
  train = lambda: warm_started(config, taskset, tok, model_config, agents,
                               log=log, initial=initial)
  directory, figures = (train() if store is None or processes.count() == 1
                        else _shared_warm_start(config, store, train, log))
  for name in names:
    models[name] = load_model(directory, mesh=meshes[name])[0]
  return tok, models, figures


# How long the role's other processes wait for process 0's warm start (its
# SFT may take hours at scale; a process 0 that dies ends them sooner,
# runtime/distributed.py).
WARM_START_WAIT_S = 24 * 3600.0


def _shared_warm_start(config, store, train: Callable[[], tuple],
                       log: Callable[[str], None]):
  """(directory, figures) of the warm start in every process of the role:
  process 0 trains it (or finds it in its cache) and shares its files
  through the store; the others wait, then copy them into their own cache
  (hosts do not share one) unless it holds them already."""
  import json
  from mgrpo_jax.runtime.cache import write_entry
  from mgrpo_jax.train.warm_start import (FIGURES, warm_start_dir,
                                          warm_start_key)
  key = warm_start_key(config)
  if processes.primary():
    directory, figures = train()
    store.share_warm_start(key, directory)
  processes.barrier("warm start shared", timeout_s=WARM_START_WAIT_S)
  if processes.primary():
    return directory, figures
  directory = warm_start_dir(config)
  if not (directory / FIGURES).is_file():
    write_entry(directory, lambda folder: store.copy_warm_start(key, folder),
                is_complete=lambda d: (d / FIGURES).is_file())
    log(f"warm start: copied from the store into {directory} (process 0 "
        "of the role trained it)")
  figures = json.loads((directory / FIGURES).read_text())
  return directory, {**figures, "sft/cached": 1.0}
