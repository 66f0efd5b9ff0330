"""N sub-agent kinds: a searcher ("sub") and a verifier, each its own model,
learner, mesh, store channel, alignment and advantages."""

import itertools
import pathlib

import pytest
from agent_test_utils import ScriptedPolicy, answer, call, last_user_message
from trainer_test_utils import tiny_config

from mgrpo_jax.agents import team
from mgrpo_jax.runtime import store as store_lib
from mgrpo_jax.runtime.config_checks import ConfigError
from mgrpo_jax.train import data as train_data
from mgrpo_jax.train import side as side_lib
from mgrpo_jax.train import trainer


def two_kinds(tmp_path, **train):
  config = tiny_config(tmp_path, **train)
  config.agents.sub_kinds = ("sub", "verifier")
  config.agents.main.max_turns = 4
  config.agents.verifier.max_turns = 2
  config.agents.verifier.max_new_tokens = 64
  config.agents.verifier.context_tokens = 1024
  config.agents.verifier.rows = 8
  config.learner.verifier.update(config.learner.sub.to_dict())
  config.align.d_max = 2
  config.align.verifier_d_max = 1
  return config


class _Scripted(ScriptedPolicy):
  """A scripted sampler that takes weights like an Engine (and ignores
  them: the learners train the real tiny models on its trajectories)."""
  weights_version = -1

  def update_weights(self, params, version):
    self.weights_version = version


def _scripted_team(config, monkeypatch):
  """Replaces the samplers with scripts: the main agent delegates once,
  asks the verifier twice (D_max 1: one call is dropped), then answers,
  right on every other rollout (so rewards differ within each group)."""
  data = train_data.load_data(config)
  gold = {t.question: t.answers[0]
          for t in [*data.train, *data.validation, *data.test]}
  right = itertools.cycle([True, False])

  def main_script(text, turn):
    question = last_user_message(text)
    if turn == 0:
      return call("delegate", task=question)
    if turn in (1, 2):
      return call("verify", claim=f"claim {turn}")
    return answer(gold[question] if next(right) else "nobody")

  real = team.build_team

  def build(agents, backend, *, main_model, main_tokenizer, sub_models,
            runtime=None, policies=None):
    assert not policies  # No scripted agent in this config.
    tok = main_tokenizer
    policies = {
        "main": _Scripted(tok, main_script, max_conversations=8),
        "sub": _Scripted(tok, lambda text, turn: answer("a report"),
                         max_conversations=8),
        "verifier": _Scripted(tok, lambda text, turn: answer("supported"),
                              max_conversations=8)}
    return real(agents, backend, main_model=main_model,
                main_tokenizer=main_tokenizer, sub_models=sub_models,
                policies=policies, runtime=runtime)

  monkeypatch.setattr(side_lib, "build_team", build)


def test_two_kinds_train_through_the_store(tmp_path, monkeypatch):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  config = two_kinds(tmp_path, steps=2)
  _scripted_team(config, monkeypatch)
  logged = {}
  trainer.run(config, on_log=lambda step, m: logged.update({step: m}),
              log=lambda m: None)
  last = logged[2]
  # Each kind's calls, rewards and its own alignment: one delegation into
  # D_max 2 slots, two verifications into D_max 1 (one dropped per rollout).
  assert last["sub/calls_per_rollout"] == 1.0
  assert last["verifier/calls_per_rollout"] == 2.0
  assert last["align/dropped_calls"] == 0.0
  assert last["verifier_align/dropped_calls"] == 4.0  # B*K = 4 rollouts.
  assert last["verifier_align/valid_slots"] == 1.0
  assert last["align/valid_slots"] == 1.0  # Free slots filled by duplicates.
  # Both learners updated (their rewards vary with the main outcome).
  for kind in ("sub", "verifier"):
    assert last[f"{kind}/skipped_update"] == 0.0
    assert last[f"{kind}/loss"] == last[f"{kind}/loss"]  # Not NaN.
    assert f"time/{kind}_update" in last
  assert (last["weights/published_checksum"]
          != last["weights/verifier_published_checksum"])
  # Each kind has its own store channel and checkpoints.
  run = pathlib.Path(config.run_dir)
  store = store_lib.open_store(str(run / "store"))
  assert store.latest_weights_step("sub") == 2
  assert store.latest_weights_step("verifier") == 2
  arrays, _ = store.read_step(1)
  assert {k.split(".")[0] for k in arrays} == {"sub", "verifier"}
  for name in ("main", "sub", "verifier"):
    assert (run / "checkpoints" / name).is_dir()


def test_a_kind_trains_in_its_own_process_role(tmp_path, monkeypatch):
  """--role=verifier builds the verifier's mesh, model and learner only."""
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  config = two_kinds(tmp_path, steps=1)
  side = side_lib.Side(config, "verifier", lambda m: None)
  try:
    assert list(side.meshes) == ["verifier"]
    assert list(side.learners) == ["verifier"]
    assert side.controller is None
  finally:
    side.close()


@pytest.mark.parametrize("change, message", [
    (lambda c: c.agents.update({"sub_kinds": ("sub", "critic")}),
     "unknown sub-agent kind 'critic'; expected kinds of"),
    (lambda c: c.agents.update({"sub_kinds": ()}),
     r"config.agents.sub_kinds=\(\): expected a tuple of distinct"),
    (lambda c: c.agents.update({"sub_kinds": ("sub", "sub")}),
     "expected a tuple of distinct sub-agent kinds"),
    (lambda c: c.agents.verifier.update({"tools": ()}),
     r"config.agents.verifier.tools=\(\): expected a non-empty tuple"),
    (lambda c: c.agents.verifier.update({"tools": ("search", "fly")}),
     r"config.agents.verifier.tools=\('search', 'fly'\)"),
    (lambda c: c.align.update({"verifier_d_max": -1}),
     "config.align.verifier_d_max=-1"),
    (lambda c: c.agents.update({"layout": "single"}),
     r"config.agents.layout='single': expected 'multi' in a training config"),
])
def test_bad_kinds_are_named_before_compute(tmp_path, change, message):
  config = two_kinds(tmp_path, steps=1)
  change(config)
  with pytest.raises(ConfigError, match=message):
    trainer.run(config, log=lambda m: None)
  assert not pathlib.Path(config.run_dir).exists()


def test_a_role_names_a_kind_of_the_config(tmp_path):
  config = two_kinds(tmp_path, steps=1)
  with pytest.raises(ConfigError, match=r"--role='critic': expected one of "
                     r"\['all', 'main', 'sub', 'verifier'\]"):
    trainer.check_config(config, "critic")


def test_two_kinds_on_overlapping_meshes_are_refused(tmp_path):
  config = two_kinds(tmp_path, steps=1)
  config.mesh.share = False
  config.mesh.sub.device_ids = (1,)
  config.mesh.verifier.device_ids = (1,)
  with pytest.raises(ConfigError, match=r"config.mesh.verifier.device_ids="
                     r"\(1,\): expected ids not used by another agent; "
                     r"device 1 is also in config.mesh.sub.device_ids"):
    trainer.run(config, log=lambda m: None)
  assert not pathlib.Path(config.run_dir).exists()
