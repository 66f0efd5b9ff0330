"""Exact resume in every mode: a run SIGKILLed 2 steps past its last
checkpoint resumes and logs every figure an uninterrupted run logs; a
finished run extended (train.steps raised) continues exactly."""

import pathlib

import pytest
from trainer_test_utils import (assert_same_figures, by_step, sigkill_after,
                                tiny_config)

from mgrpo_jax.train import trainer
from mgrpo_jax.runtime.metrics import MetricsWriter

STEPS = 6
EVERY = 3  # Checkpoints at 3 and 6: killed after step 5 is 2 past one.

MODES = {
    "mgrpo_one_step_beta": dict(mode="mgrpo", staleness="one_step",
                                beta=0.05),
    "mgrpo_sync": dict(mode="mgrpo", staleness="sync"),
    "mgrpo_one_step": dict(mode="mgrpo", staleness="one_step"),
    "frozen_sub_beta": dict(mode="frozen_sub", staleness="sync", beta=0.05),
    "single": dict(mode="single", staleness="sync"),
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  """One warm start per mode for the whole module (and its children)."""
  return tmp_path_factory.mktemp("cache")


def mode_config(tmp_path, mode, staleness, beta=0.0, steps=STEPS):
  config = tiny_config(tmp_path, steps=steps, staleness=staleness,
                       eval_every=STEPS, group_size=4)
  # Enough SFT that rollouts differ in reward: a random model scores 0
  # everywhere, its advantages are 0 and no update would ever happen.
  config.sft.steps = 200
  config.sft.learning_rate = 1e-2
  config.mode = mode
  config.agents.temperature = 1.0  # Rollouts of a question differ more.
  if mode == "single":
    config.agents.main.max_turns = 3
  config.checkpoint.every = EVERY
  config.store.keep_weights = 1  # Only the checkpoints keep old versions.
  for side in ("main", "sub"):
    config.learner[side].beta = beta
    config.learner[side].learning_rate = 1e-3  # Weights visibly move.
  return config


def figures(config):
  return by_step(MetricsWriter.read(pathlib.Path(config.run_dir) / "all"))


def check_resume(tmp_path, monkeypatch, cache, mode):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(cache))
  ref = mode_config(tmp_path / "ref", **MODES[mode])
  trainer.run(ref, log=lambda m: None)
  expected = figures(ref)
  assert sorted(expected) == list(range(STEPS + 1))
  # The weights did move (a resume that lost them would log other figures).
  assert min(expected[s]["main/skipped_update"]
             for s in range(1, STEPS + 1)) == 0

  killed = mode_config(tmp_path / "killed", **MODES[mode])
  before = sigkill_after(killed, tmp_path, STEPS - 1, cache)
  assert max(before) in (STEPS - 1, STEPS)
  logs = []
  trainer.run(killed, log=logs.append)
  assert any(f"resumed from the checkpoint of step {EVERY}" in m
             for m in logs), logs
  got = figures(killed)
  assert sorted(got) == sorted(expected)
  assert_same_figures(expected, got)
  return expected


@pytest.mark.slow  # 75 s; trainer_test keeps a SIGKILL resume in the default run.
def test_sigkill_two_steps_past_a_checkpoint_resumes_exactly(
    tmp_path, monkeypatch, cache):
  """M-GRPO with one_step staleness and a KL term: the resume needs a sub
  weight version older than the newest (kept by the store because the
  checkpoint needs it) and the KL reference as it was (a fresh init would
  change every figure after the resume)."""
  expected = check_resume(tmp_path, monkeypatch, cache, "mgrpo_one_step_beta")
  assert max(expected[s]["main/ref_kl"] for s in expected if s) > 0
  # one_step: rollout n samples sub version n - 1 and the sub learner is at
  # n, so its data is one version stale (its behaviour log-probs anchor the
  # correction); the main agent is on-policy and its learner matches its
  # sampler at the rollouts' temperature.
  for step in range(1, STEPS + 1):
    assert expected[step]["main/staleness"] == 0
    assert expected[step]["main/behaviour_logp_gap_max"] < 1e-3
    if "sub/staleness" in expected[step]:
      assert expected[step]["sub/staleness"] == (step > 1)
  assert any("sub/staleness" in expected[s] for s in range(2, STEPS + 1))
  # Evaluation saw the newest sub weights, not the one-step-stale ones.
  assert expected[STEPS]["eval/sub_version"] == STEPS
  assert expected[0]["eval/sub_version"] == 0


@pytest.mark.slow  # A few minutes per mode on 2 cores.
@pytest.mark.parametrize("mode", ["mgrpo_sync", "mgrpo_one_step",
                                  "frozen_sub_beta", "single"])
def test_sigkill_resume_in_every_mode(tmp_path, monkeypatch, cache, mode):
  """frozen_sub: the frozen sub-agent comes back as it was."""
  check_resume(tmp_path, monkeypatch, cache, mode)


@pytest.mark.slow  # Two minutes on 2 cores.
def test_a_finished_run_extended_continues_exactly(tmp_path, monkeypatch,
                                                  cache):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(cache))
  ref = mode_config(tmp_path / "ref", **MODES["mgrpo_one_step"], steps=4)
  trainer.run(ref, log=lambda m: None)
  short = mode_config(tmp_path / "ext", **MODES["mgrpo_one_step"], steps=2)
  trainer.run(short, log=lambda m: None)
  short.train.steps = 4
  trainer.run(short, log=lambda m: None)
  expected, got = figures(ref), figures(short)
  assert sorted(got) == [0, 1, 2, 3, 4]
  assert_same_figures(expected, got)
