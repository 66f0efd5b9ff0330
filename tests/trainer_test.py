"""The M-GRPO trainer end to end on a tiny team: store, learners, resume
after SIGKILL, staleness, a sub side that never answers, bad configs."""

import json
import pathlib

import pytest
from flax import nnx
from trainer_test_utils import by_step, sigkill_after, tiny_config

from mgrpo_jax.models import tiny as tiny_model
from mgrpo_jax.agents import demonstrations
from mgrpo_jax import evaluate
from mgrpo_jax.agents.team import agents_config
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.agents import tiny_team as tiny
from mgrpo_jax.train import side as side_lib
from mgrpo_jax.train import evaluator
from mgrpo_jax.train import trainer
from mgrpo_jax.agents.diagnostics import Grader
from mgrpo_jax.train.outcomes import read_outcomes
from mgrpo_jax.train.trained import load_trained
from mgrpo_jax.runtime.config_checks import ConfigError
from mgrpo_jax.runtime.metrics import MetricsWriter
from mgrpo_jax.runtime.store import StoreTimeout

def test_sigkill_resume_staleness_and_a_silent_sub_side(tmp_path, monkeypatch):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  logs = []
  # 1. The uninterrupted reference: 3 steps, sub weights one step stale.
  ref = tiny_config(tmp_path / "ref", steps=3, staleness="one_step")
  logged = []
  trainer.run(ref, on_log=lambda step, m: logged.append(step),
              log=logs.append)
  assert logged == [1, 2, 3]
  run = pathlib.Path(ref.run_dir)
  assert sorted(p.name for p in (run / "store" / "steps").iterdir()) == [
      "0000000000", "0000000001", "0000000002"]
  for agent in ("main", "sub"):
    assert (run / "checkpoints" / agent / "3").is_dir()
  records = MetricsWriter.read(run / "all")
  assert [r["step"] for r in records] == [0, 0, 1, 2, 3]  # SFT, eval, steps.
  for key in ("main/reward", "sub/calls_per_rollout", "time/rollout",
              "main/loss", "sub/loss", "time/step", "eval/accuracy"):
    assert key in records[-1]
  expected = by_step(records)
  # The signal figures of every step: a step is skipped exactly when no
  # group of the agent carries a nonzero advantage.
  for step in (1, 2, 3):
    for agent in ("main", "sub"):
      groups = expected[step][f"{agent}/informative_groups"]
      assert 0.0 <= expected[step][f"{agent}/informative_rows"] <= 1.0
      assert (groups == 0.0) == (
          expected[step][f"{agent}/skipped_update"] == 1.0), (step, agent)
  # Per-question outcomes of every evaluation: their mean is the figure.
  outcomes = read_outcomes(run / "all")
  assert sorted(outcomes) == [0, 2, 3]  # eval_every 2, and the last step.
  for step, split in outcomes.items():
    assert len(split["validation"]) == ref.train.eval_questions
    assert (sum(split["validation"].values()) / len(split["validation"])
            == expected[step]["eval/accuracy"])
    # And each question's sampled rollouts (train.eval_samples of them).
    sampled = split["validation_sampled"]
    assert sorted(sampled) == sorted(split["validation"])
    assert {len(v) for v in sampled.values()} == {ref.train.eval_samples}
    assert (sum(map(sum, sampled.values())) / sum(map(len, sampled.values()))
            == pytest.approx(expected[step]["eval/sampled_accuracy"]))
    # The per-agent diagnostics of the sampled rollouts beside the greedy's.
    assert 0.0 <= expected[step]["eval/sampled_visits_per_hop"]
  # one_step: rollout n (logged as step n+1) sampled the sub weights after
  # update n-1, and those are the weights the sub side published then.
  for step in (1, 2, 3):
    assert expected[step]["weights/sub_step"] == max(step - 2, 0)
  assert expected[3]["weights/sub_checksum"] == (
      expected[1]["weights/published_checksum"])
  # The trained agents load from their Orbax checkpoints: the sub weights
  # are those published after the last update, and the evaluation CLI's
  # greedy rollouts of both agents score what the trainer's own did.
  sub, _, step = load_trained(run / "checkpoints" / "sub")
  assert step == 3
  assert side_lib.checksum(nnx.state(sub)) == (
      expected[3]["weights/published_checksum"])
  scored = evaluate.evaluate(ref, checkpoint=str(run / "checkpoints" / "main"),
                             output_dir=str(tmp_path / "eval"),
                             progress=False)
  assert scored["pass@1"] == expected[3]["eval/accuracy"]
  assert scored["format"] == expected[3]["eval/format"]
  assert scored["sub_calls_per_rollout"] == expected[3]["eval/sub_calls"]
  assert scored["novel_share"] == expected[3]["eval/novel_share"]
  assert scored.get("novel_accuracy") == expected[3].get(
      "eval/novel_accuracy")
  # The warm start stays as step 0 beside the newest max_to_keep = 3
  # checkpoints, and scores what the trainer's step-0 evaluation did; any
  # split can be evaluated ("synthetic:test" with a training config).
  for agent in ("main", "sub"):
    assert sorted(int(p.name) for p in (run / "checkpoints" / agent).iterdir()
                  if p.name.isdigit()) == [0, 1, 2, 3]
  start = evaluate.evaluate(ref, checkpoint=str(run / "checkpoints" / "main"
                                                / "0"),
                            output_dir=str(tmp_path / "eval0"), progress=False)
  assert start["pass@1"] == expected[0]["eval/accuracy"]
  assert start["format"] == expected[0]["eval/format"]
  evaluate.evaluate(ref, data="synthetic:test",
                    checkpoint=str(run / "checkpoints" / "main"),
                    output_dir=str(tmp_path / "eval_test"), progress=False)
  written = json.loads((tmp_path / "eval_test" / "metrics.json").read_text())
  assert written["split"] == "test"
  lines = (tmp_path / "eval_test" / "transcripts.jsonl").read_text()
  assert len(lines.splitlines()) == ref.world.test_questions

  # 2. The same run in a child process, SIGKILLed once step 1 is logged
  # and checkpointed. Its own cache: it trains its tokenizer and warm start
  # itself.
  killed = tiny_config(tmp_path / "killed", steps=3, staleness="one_step")
  metrics_file = pathlib.Path(killed.run_dir) / "all" / "metrics.jsonl"
  checkpoints = pathlib.Path(killed.run_dir) / "checkpoints"
  before = sigkill_after(killed, tmp_path, 1, also=lambda: all(
      (checkpoints / a / "1").is_dir() for a in ("main", "sub")))
  assert max(before) in (1, 2)  # Killed inside step 2 or 3.

  # 3. Resume: no step lost, none repeated, the same numbers as step 1.
  logged.clear()
  logs.clear()
  trainer.run(killed, on_log=lambda step, m: logged.append(step),
              log=logs.append)
  assert logged and logged[-1] == 3
  assert logged == list(range(logged[0], 4))
  assert any("resumed from the checkpoint" in m for m in logs)
  after = MetricsWriter.read(metrics_file.parent)
  assert sum("sft/loss_last" in r for r in after) == 1  # SFT ran once.
  got = by_step(after)
  assert sorted(got) == sorted(expected) == [0, 1, 2, 3]
  for step in expected:
    assert got[step].keys() == expected[step].keys(), step
    for key, value in expected[step].items():
      assert got[step][key] == pytest.approx(value, rel=1e-5, abs=1e-7), (
          step, key)

  # A bad value on the command line of an existing run changes nothing of
  # what it wrote: checkpoints, store records, metrics.
  def snapshot():
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in pathlib.Path(killed.run_dir).rglob("*") if p.is_file()}
  written = snapshot()
  for field, bad in (("group_size", 1), ("steps", 0)):
    good = killed.train[field]
    killed.train[field] = bad
    with pytest.raises(ConfigError, match=f"config.train.{field}={bad}"):
      trainer.run(killed, log=logs.append)
    killed.train[field] = good
  assert snapshot() == written

  # 4. --role=main alone, with sync staleness: step 4 samples the weights
  # published after update 3, then waits for update 4 that no sub side will
  # publish; it stops with a clear message and keeps what it wrote. (No
  # evaluation at step 4: it would wait for update 4 already, as evaluation
  # uses the newest weights.)
  killed.train.steps = 5
  killed.train.eval_every = 5
  killed.train.staleness = "sync"
  killed.store.timeout_s = 2.0
  logged.clear()
  logs.clear()
  with pytest.raises(StoreTimeout, match=r"weights of step 4.*--role=sub.*"
                     r"config.store.timeout_s"):
    trainer.run(killed, role="main", on_log=lambda s, m: logged.append(s),
                log=logs.append)
  assert logged == [4]
  assert any("waiting for the sub side's weights of step 4" in m
             for m in logs)
  main_records = by_step(MetricsWriter.read(pathlib.Path(killed.run_dir)
                                            / "main"))
  assert main_records[4]["weights/sub_step"] == 3
  assert main_records[4]["weights/sub_checksum"] == (
      got[3]["weights/published_checksum"])
  assert (pathlib.Path(killed.run_dir) / "checkpoints" / "main" / "4").is_dir()
  assert (pathlib.Path(killed.run_dir) / "store" / "steps" /
          "0000000003").is_dir()


def test_evaluate_scores_greedy_and_sampled_rollouts():
  world = generate_world(WorldConfig(num_entities=40, train_questions=6,
                                     validation_questions=2,
                                     test_questions=2, max_hops=2))
  taskset = world.task_set("train")
  tok = tiny_model.train_tokenizer(tiny.tokenizer_texts(world), 512)
  # The perfect oracle team answers every question, greedy or sampled.
  team = demonstrations.oracle_team(taskset, tok, agents_config())
  figures = evaluator.evaluate(team, list(taskset.tasks), samples=3)
  for key in ("accuracy", "sampled_accuracy", "sampled_format"):
    assert figures[f"eval/{key}"] == 1.0, key
  assert "eval/sampled_accuracy" not in evaluator.evaluate(
      team, list(taskset.tasks))
  # With a grader, the per-agent diagnostics; a prefix names the split.
  figures = evaluator.evaluate(team, list(taskset.tasks), prefix="test",
                             grader=Grader(taskset.documents))
  assert figures["test/accuracy"] == 1.0 and "time/test" in figures
  assert figures["test/sub_report_accuracy"] == 1.0
  assert figures["test/visits_per_hop"] == 1.0
  # One that errs on every turn: all 18 sampled rollouts are scored.
  team = demonstrations.oracle_team(taskset, tok, agents_config(), noise=1.0)
  figures = evaluator.evaluate(team, list(taskset.tasks), samples=3)
  assert figures["eval/accuracy"] == 0.0
  assert figures["eval/sampled_accuracy"] * 18 == pytest.approx(
      round(figures["eval/sampled_accuracy"] * 18))
  assert figures["eval/sampled_accuracy"] < 0.5


def test_bad_config_is_refused_before_any_compute(tmp_path):
  config = tiny_config(tmp_path)
  config.align.d_max = -1  # 0 is alignment off (the ablation).
  with pytest.raises(ConfigError, match="config.align.d_max=-1"):
    trainer.run(config, log=lambda m: None)
  config.align.d_max = 2
  config.mode = "both"
  with pytest.raises(ConfigError, match="config.mode='both'"):
    trainer.run(config, log=lambda m: None)
  config.mode = "frozen_sub"
  with pytest.raises(ConfigError, match="--role=sub with config.mode"):
    trainer.run(config, role="sub", log=lambda m: None)
  config.mode = "mgrpo"
  config.train.eval_samples = -1
  with pytest.raises(ConfigError, match="config.train.eval_samples=-1"):
    trainer.run(config, log=lambda m: None)
  config.train.eval_samples = 0
  for field, bad in (("sft.noise", 1.5), ("sft.early_answer", -0.2),
                     ("sft.lazy_report", 1.5), ("train.test_questions", -1),
                     ("sft.steps", -1), ("sft.questions", 0),
                     ("sft.learning_rate", 0.0)):
    section, name = field.split(".")
    good = config[section][name]
    config[section][name] = bad
    with pytest.raises(ConfigError, match=f"config.{field}={bad}"):
      trainer.run(config, log=lambda m: None)
    config[section][name] = good
  for field, bad in (("advantage.scale", "zscore"),
                     ("advantage.sub_group_by", "agent"),
                     ("align.fill", "zeros"), ("reward.preset", "mine"),
                     ("train.staleness", "two_steps")):
    section, name = field.split(".")
    good = config[section][name]
    config[section][name] = bad
    with pytest.raises(ConfigError, match=f"config.{field}='{bad}'"):
      trainer.run(config, log=lambda m: None)
    config[section][name] = good
  config.learner.main.aggregation = "token_sum"
  with pytest.raises(ConfigError, match="config.learner.main.*token_sum"):
    trainer.run(config, log=lambda m: None)
  config.learner.main.aggregation = "token_mean"
  config.learner.main.micro_batch = 0
  with pytest.raises(ConfigError, match="config.learner.main"):
    trainer.run(config, log=lambda m: None)
  assert not pathlib.Path(config.run_dir).exists()


def test_the_sub_side_builds_only_what_it_trains(tmp_path, monkeypatch):
  """--role=sub on a slice whose main mesh could not be built (more
  devices than there are, mesh.share False): it builds the sub mesh, model
  and learner only; no sampler, no main model."""
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  config = tiny_config(tmp_path, steps=1)
  config.mesh.share = False
  config.mesh.main.devices = 64
  config.mesh.sub.devices = 2
  side = side_lib.Side(config, "sub", lambda m: None)
  try:
    assert list(side.meshes) == ["sub"]
    assert side.main is None and side.controller is None
    assert list(side.learners) == ["sub"]
    assert side.learners["sub"].mesh.devices.size == 2
  finally:
    side.close()
