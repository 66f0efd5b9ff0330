"""A tiny-team trainer config shared by the trainer and two-process tests."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def tiny_config(tmp_path, **train):
  """configs/default.py shrunk to seconds per step; `train` overrides
  fields of config.train."""
  spec = importlib.util.spec_from_file_location(
      "default_config", ROOT / "configs" / "default.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  config.run_dir = str(pathlib.Path(tmp_path) / "run")
  config.model.vocab_size = 512
  config.model.hidden_size = 32
  config.model.num_layers = 1
  config.sft.steps = 2
  config.sft.batch_size = 4
  config.sft.questions = 4
  config.world.num_entities = 40
  config.world.train_questions = 8
  config.world.validation_questions = 2
  config.world.test_questions = 2
  config.world.max_hops = 1
  for side in ("main", "sub"):
    config.agents[side].max_turns = 2
    config.agents[side].max_new_tokens = 64
    config.agents[side].context_tokens = 1024
    config.agents[side].rows = 4
    config.learner[side].max_len = 1024
    config.learner[side].min_len = 256
    config.learner[side].micro_batch = 4
  config.train.questions_per_step = 2
  config.train.group_size = 2
  config.train.eval_questions = 2
  config.train.eval_every = 2
  config.checkpoint.every = 1
  config.train.update(train)
  return config
