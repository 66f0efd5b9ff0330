"""The trainer's warm start: one SFT for the team, cached by its settings."""

import pathlib

from trainer_test_utils import tiny_config

from mgrpo_jax.data.task import TaskSet
from mgrpo_jax.data.world import WorldConfig
from mgrpo_jax.models.build import init_model
from mgrpo_jax.models.hf_checkpoint import (model_arrays, read_hf_checkpoint,
                                            save_hf_checkpoint)
from mgrpo_jax.agents import tiny_team as tiny
from mgrpo_jax.train import team_build
from mgrpo_jax.train import data as train_data
from mgrpo_jax.train.warm_start import warm_start_key, warm_started


def test_trained_once_then_reused_keyed_by_every_setting(tmp_path,
                                                         monkeypatch):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  config = tiny_config(tmp_path)
  data = train_data.load_data(config)
  tok, model_config = tiny.tiny_team_assets(
      WorldConfig(**config.world.to_dict()),
      vocab_size=config.model.vocab_size,
      hidden_size=config.model.hidden_size,
      num_layers=config.model.num_layers,
      max_position_embeddings=config.agents.main.context_tokens)
  taskset = TaskSet("sft", data.train[:config.sft.questions],
                    data.documents)
  agents = team_build.agents_section(config)
  logs = []
  first, figures = warm_started(config, taskset, tok, model_config, agents,
                                log=logs.append)
  assert figures["sft/cached"] == 0.0 and figures["sft/steps"] == 2
  assert figures["sft/demonstrations"] > len(taskset.tasks)  # Main + subs.
  assert any("SFT of a" in m for m in logs)
  weights = read_hf_checkpoint(first)[1]
  # The same settings again: read back, not trained again.
  logs.clear()
  again, cached = warm_started(config, taskset, tok, model_config, agents,
                               log=logs.append)
  assert again == first and cached["sft/cached"] == 1.0
  assert cached["sft/loss_last"] == figures["sft/loss_last"]
  assert any("reusing" in m for m in logs)
  # cache=False trains afresh (same seed: same weights) into the same entry.
  config.sft.cache = False
  assert warm_start_key(config) == warm_start_key(tiny_config(tmp_path))
  fresh, figures = warm_started(config, taskset, tok, model_config, agents,
                                log=logs.append)
  assert fresh == first and figures["sft/cached"] == 0.0
  for name, array in read_hf_checkpoint(fresh)[1].items():
    assert (array == weights[name]).all(), name
  # Any setting the weights depend on changes the key.
  for section, field, value in (("sft", "steps", 3), ("sft", "noise", 0.2),
                                ("sft", "early_answer", 0.5),
                                ("agents", "prompt_style", "full"),
                                ("model", "vocab_size", 1024),
                                ("world", "seed", 1), ("model", "hidden_size",
                                                       64),
                                ("agents", "visit_chars", 100)):
    other = tiny_config(tmp_path)
    other[section][field] = value
    assert warm_start_key(other) != warm_start_key(config), (section, field)
  other = tiny_config(tmp_path)
  other.agents.temperature = 0.3  # The oracle plays greedily anyway.
  assert warm_start_key(other) == warm_start_key(config)
  other.agents.sampler_dtype = "bfloat16"  # It never samples from a model.
  assert warm_start_key(other) == warm_start_key(config)
  del other.agents["sampler_dtype"]  # A config from before the field.
  assert warm_start_key(other) == warm_start_key(config)
  other.agents.share_base = not config.agents.share_base  # Memory layout.
  assert warm_start_key(other) == warm_start_key(config)
  del other.agents["share_base"]  # A config from before the field.
  assert warm_start_key(other) == warm_start_key(config)
  # RL-only learner settings do not touch the warm start; SFT's do.
  other.learner.main.learning_rate = 3e-3
  other.learner.main.beta = 0.1
  other.learner.sub.learning_rate = 3e-3
  assert warm_start_key(other) == warm_start_key(config)
  changed = tiny_config(tmp_path)
  changed.learner.main.clip_norm = 0.5
  assert warm_start_key(changed) != warm_start_key(config)
  other.mode = "frozen_sub"  # Same team, same demonstrations: shared.
  assert warm_start_key(other) == warm_start_key(config)
  other.mode = "single"
  assert warm_start_key(other) != warm_start_key(config)
  assert pathlib.Path(first).parent.name == "warm_starts"
  other = tiny_config(tmp_path)
  other.sft.demonstrations = "gold"
  assert warm_start_key(other) != warm_start_key(config)


def test_a_pretrained_checkpoint_is_warm_started_from_its_weights(
    tmp_path, monkeypatch):
  """A model name that is not "tiny" (here a small checkpoint directory
  standing in for SmolLM2) is the SFT's start: its own tokenizer, its own
  weights, then every agent loads the saved warm start."""
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  base = tiny_config(tmp_path)
  data = train_data.load_data(base)
  tok, model_config = tiny.tiny_team_assets(
      WorldConfig(**base.world.to_dict()), vocab_size=base.model.vocab_size,
      hidden_size=base.model.hidden_size, num_layers=base.model.num_layers,
      max_position_embeddings=2048)
  pretrained = tmp_path / "pretrained"
  save_hf_checkpoint(init_model(model_config, seed=7), tok, pretrained)
  config = tiny_config(tmp_path)
  config.model.name = str(pretrained)
  meshes = {name: None for name in ("main", "sub")}
  logs = []
  got_tok, models, figures = team_build.build_models(
      config, meshes, data, ["main", "sub"], log=logs.append)
  assert figures["sft/steps"] == 2 and figures["sft/cached"] == 0.0
  assert got_tok.vocab_size == tok.vocab_size
  start = read_hf_checkpoint(pretrained)[1]
  warm = model_arrays(models["main"])
  assert any(not (warm[k] == start[k]).all() for k in start)  # It learned.
  for name in warm:  # Both agents start from the same warm start.
    assert (warm[name] == model_arrays(models["sub"])[name]).all()
  # Without SFT the checkpoint is every agent's start as it is.
  config.sft.steps = 0
  _, models, figures = team_build.build_models(config, meshes, data,
                                               ["main"])
  assert figures == {}
  for name, array in model_arrays(models["main"]).items():
    assert (array == start[name]).all(), name
