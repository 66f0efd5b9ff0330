"""Scripted agents for the positive controls (train/scripted.py): the oracle
plays one agent, never trained, while the other learns."""

import pathlib

import pytest

from trainer_test_utils import by_step, tiny_config

from mgrpo_jax.runtime.config_checks import ConfigError
from mgrpo_jax.runtime.metrics import MetricsWriter
from mgrpo_jax.train import run_checks, trainer


def two_hop_config(tmp_path, **train):
  config = tiny_config(tmp_path, steps=1, eval_every=1, **train)
  config.world.max_hops = 2
  config.world.validation_questions = 4
  config.train.eval_questions = 4
  config.agents.main.max_new_tokens = 96  # A delegation's whole call.
  config.agents.main.max_turns = 3
  return config


def run(config, tmp_path, monkeypatch):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  trainer.run(config, on_log=lambda step, m: None, log=lambda line: None)
  return by_step(MetricsWriter.read(pathlib.Path(config.run_dir) / "all"))


def test_a_scripted_planner_leaves_the_sub_agent_to_learn(tmp_path,
                                                         monkeypatch):
  config = two_hop_config(tmp_path, scripted="main")
  config.mode = "frozen_main"
  config.reward.v_main, config.reward.v_fmt, config.reward.v_exp = 0., 0., 1.
  config.advantage.sub_group_by = "subtask"
  steps = run(config, tmp_path, monkeypatch)
  # The oracle decomposes every question; only the sub-agent trains.
  assert steps[0]["eval/main_delegations_hop1"] == 1.0
  assert steps[0]["eval/main_delegations_hop2"] == 2.0
  assert steps[0]["eval/format"] == 1.0
  assert "sub/loss" in steps[1] and "main/loss" not in steps[1]
  checkpoints = pathlib.Path(config.run_dir) / "checkpoints"
  assert (checkpoints / "sub").is_dir() and not (checkpoints / "main").exists()


@pytest.mark.slow  # Fast siblings: the refusals below, counterfactual_test.
def test_a_scripted_reader_leaves_the_planner_to_learn(tmp_path, monkeypatch):
  config = two_hop_config(tmp_path, scripted="sub")
  config.mode = "frozen_sub"
  config.agents.sub.max_new_tokens = 96  # A report with its evidence.
  config.agents.sub.max_turns = 3
  steps = run(config, tmp_path, monkeypatch)
  assert "main/loss" in steps[1] and "sub/loss" not in steps[1]
  checkpoints = pathlib.Path(config.run_dir) / "checkpoints"
  assert (checkpoints / "main").is_dir() and not (checkpoints / "sub").exists()
  # Whatever the barely-trained planner delegated, the reader got right.
  if "eval/sub_gradeable" in steps[0] and steps[0]["eval/sub_gradeable"]:
    assert steps[0]["eval/sub_report_accuracy"] == 1.0


@pytest.mark.parametrize("scripted,mode,expected", [
    ("main", "mgrpo", "config.mode='frozen_main'"),
    ("sub", "frozen_main", "config.mode='frozen_sub'"),
    ("both", "mgrpo", "one of"),
])
def test_a_scripted_agent_that_would_train_is_refused(tmp_path, scripted,
                                                       mode, expected):
  config = tiny_config(tmp_path, scripted=scripted)
  config.mode = mode
  with pytest.raises(ConfigError, match=f"train.scripted='{scripted}'.*"
                     f"{expected}"):
    run_checks.check_run_config(config, "all")


def test_frozen_main_trains_a_sub_role(tmp_path):
  config = tiny_config(tmp_path)
  config.mode = "frozen_main"
  run_checks.check_run_config(config, "sub")
  config.mode = "frozen_sub"
  with pytest.raises(ConfigError, match="--role=sub with config.mode="
                     "'frozen_sub'"):
    run_checks.check_run_config(config, "sub")
