"""A run's reading figures (train/reading.py): novel-fact accuracy in the
step logs and evaluations, and the counterfactual check, on a run whose warm
start demonstrated other worlds."""

import pytest
from trainer_test_utils import by_step, tiny_config

from mgrpo_jax.runtime.metrics import METRICS_DOC, MetricsWriter
from mgrpo_jax.train import trainer


def test_a_run_on_demonstration_worlds_logs_what_it_read(tmp_path,
                                                         monkeypatch):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  config = tiny_config(tmp_path, steps=2, test_questions=2,
                       counterfactual_questions=2)
  config.sft.worlds = 2
  logs = []
  trainer.run(config, on_log=lambda step, m: None, log=logs.append)
  assert any("of 2 demonstration worlds (none of the run's)" in line
             for line in logs)
  steps = by_step(MetricsWriter.read(tmp_path / "run" / "all"))
  for step in (0, 2):  # The evaluations: every question is novel.
    assert steps[step]["eval/novel_share"] == 1.0
    assert steps[step]["test/novel_share"] == 1.0
    assert (steps[step]["eval/novel_accuracy"]
            == steps[step]["eval/accuracy"])
    assert steps[step]["eval/counterfactual_questions"] >= 1
    shares = (steps[step]["eval/counterfactual_follows"]
              + steps[step]["eval/counterfactual_recalls"])
    assert 0.0 <= shares <= 1.0
  for step in (1, 2):
    assert steps[step]["main/novel_accuracy"] == steps[step]["main/accuracy"]
  logged = {k for record in steps.values() for k in record}
  for key in ("main/novel_accuracy", "eval/novel_accuracy",
              "eval/counterfactual_follows"):
    assert key in logged and key in METRICS_DOC


@pytest.mark.slow  # Fast sibling: demo_worlds_test's own-questions test.
def test_the_own_questions_warm_start_has_facts_it_showed(tmp_path,
                                                          monkeypatch):
  # sft.worlds=0 (the default): the warm start demonstrated all 8 of the
  # run's train questions, so none of a step's is novel.
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  config = tiny_config(tmp_path, steps=1, eval_every=1)
  config.sft.questions = 8
  trainer.run(config, on_log=lambda step, m: None, log=lambda line: None)
  steps = by_step(MetricsWriter.read(tmp_path / "run" / "all"))
  assert "main/accuracy" in steps[1]
  assert "main/novel_accuracy" not in steps[1]
  assert 0.0 <= steps[0]["eval/novel_share"] <= 1.0
