"""configs/smollm2.py: M-GRPO steps on the pretrained SmolLM2 team."""

import math
import pathlib

import pytest

from mgrpo_jax.train import trainer
from mgrpo_jax.runtime.config_checks import load_config_file
from mgrpo_jax.runtime.metrics import MetricsWriter

ROOT = pathlib.Path(__file__).resolve().parents[1]


def smollm2_config(tmp_path):
  config = load_config_file(ROOT / "configs" / "smollm2.py")
  config.run_dir = str(tmp_path / "run")
  return config


def test_config_is_valid_and_names_a_pretrained_model(tmp_path):
  config = smollm2_config(tmp_path)
  trainer.check_config(config, "all")
  assert config.model.name == "smollm2-135m-instruct"
  # Warm-started by SFT, with no scaffold: the model opens the protocol.
  assert config.sft.steps > 0
  assert not any(config.agents[side].first_turn_prefix
                 for side in ("main", "sub"))


@pytest.mark.slow  # Minutes on 2 cores: a 135M model rolls out and trains.
def test_one_step_trains_both_agents(tmp_path, monkeypatch):
  config = smollm2_config(tmp_path)
  config.sft.steps = 2
  config.sft.questions = 4
  config.sft.cache = False
  config.train.steps = 1
  config.train.questions_per_step = 1
  config.train.group_size = 2
  config.train.eval_every = 1
  config.train.eval_questions = 1
  # One step meets a few programs; compiling SmolLM2's whole closed set
  # (about 8 min here) is bench.programs' to time.
  config.runtime.shapes = "open"
  for side in ("main", "sub"):
    config.agents[side].max_turns = 2
    config.agents[side].max_new_tokens = 24
  last = trainer.run(config, log=lambda m: None)
  for key in ("main/loss", "main/accuracy", "time/rollout", "eval/accuracy"):
    assert key in last and math.isfinite(last[key]), key
  records = MetricsWriter.read(pathlib.Path(config.run_dir) / "all")
  assert [r["step"] for r in records] == [0, 0, 1]  # SFT, eval, step.
  assert records[0]["sft/steps"] == 2
  run = pathlib.Path(config.run_dir)
  assert (run / "checkpoints" / "main" / "1").is_dir()
  if last["sub/calls_per_rollout"] > 0:  # Delegated: the sub side trained.
    assert "sub/loss" in last
