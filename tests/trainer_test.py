"""The M-GRPO trainer end to end on a tiny team: store, learners, resume."""

import importlib.util
import json
import pathlib

import pytest

from mgrpo_jax.training import trainer
from mgrpo_jax.training.config_checks import ConfigError
from mgrpo_jax.training.metrics import MetricsWriter

ROOT = pathlib.Path(__file__).resolve().parents[1]


def tiny_config(tmp_path, **train):
  spec = importlib.util.spec_from_file_location(
      "mgrpo_tiny", ROOT / "configs" / "mgrpo_tiny.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  config.run_dir = str(tmp_path / "run")
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


def test_steps_store_checkpoints_and_resume(tmp_path, monkeypatch):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  config = tiny_config(tmp_path, steps=2)
  logged = []
  trainer.run(config, on_log=lambda step, m: logged.append(step),
              log=lambda message: None)
  assert logged == [1, 2]
  run = pathlib.Path(config.run_dir)
  store = run / "store"
  assert sorted(p.name for p in (store / "steps").iterdir())[-2:] == [
      "00000000", "00000001"] or len(list((store / "steps").iterdir())) == 2
  for agent in ("main", "sub"):
    assert (run / "checkpoints" / agent / "2").is_dir()
  records = MetricsWriter.read(run / "all")
  steps = [r["step"] for r in records]
  assert steps == [0, 0, 1, 2]  # SFT, the step-0 evaluation, two steps.
  for key in ("main/reward", "sub/calls_per_rollout", "time/rollout",
              "main/loss", "sub/loss", "time/step"):
    assert key in records[-1]
  assert "eval/accuracy" in records[-1]
  # Resume: the same run asked for 3 steps does only step 3.
  config.train.steps = 3
  logged.clear()
  trainer.run(config, on_log=lambda step, m: logged.append(step),
              log=lambda message: None)
  assert logged == [3]
  assert [r["step"] for r in MetricsWriter.read(run / "all")] == [
      0, 0, 1, 2, 3]


def test_bad_config_is_refused_before_any_compute(tmp_path):
  config = tiny_config(tmp_path)
  config.align.d_max = 0
  with pytest.raises(ConfigError, match="config.align.d_max=0"):
    trainer.run(config, log=lambda m: None)
  config.align.d_max = 2
  config.mode = "both"
  with pytest.raises(ConfigError, match="config.mode='both'"):
    trainer.run(config, log=lambda m: None)
  config.mode = "frozen_sub"
  with pytest.raises(ConfigError, match="--role=sub with config.mode"):
    trainer.run(config, role="sub", log=lambda m: None)
  config.mode = "mgrpo"
  config.learner.main.micro_batch = 0
  with pytest.raises(ConfigError, match="config.learner.main"):
    trainer.run(config, log=lambda m: None)
  assert not pathlib.Path(config.run_dir).exists()
