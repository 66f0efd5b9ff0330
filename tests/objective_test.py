"""On the default warm start (configs/default.py), the learners score the
policy the samplers sampled: the learner/sampler log-prob gap of a real
M-GRPO step stays below 1e-3 at the default T = 0.6, and with top-k too."""

import pathlib

import pytest

from mgrpo_jax.train import trainer
from mgrpo_jax.runtime.config_checks import load_config_file

ROOT = pathlib.Path(__file__).resolve().parents[1]


def default_config(tmp_path):
  config = load_config_file(ROOT / "configs" / "default.py")
  config.run_dir = str(tmp_path / "run")
  config.train.steps = 1
  config.train.questions_per_step = 4
  config.train.group_size = 4
  config.train.eval_questions = 2
  config.train.eval_samples = 0
  return config


@pytest.mark.slow  # The default warm start: ~4 min unless cached.
@pytest.mark.parametrize("top_k", [0, 20])
def test_default_warm_start_learner_matches_its_sampler(tmp_path, top_k):
  config = default_config(tmp_path)
  config.agents.top_k = top_k
  logged = {}
  trainer.run(config, log=lambda m: None,
              on_log=lambda step, m: logged.update(m))
  assert config.agents.temperature == 0.6
  for agent in ("main", "sub"):
    gap = logged[f"{agent}/behaviour_logp_gap_max"]
    assert 0 < gap < 1e-3, (agent, gap)
    assert logged[f"{agent}/staleness"] == 0
