"""train/compiled.py: a run on a closed set of programs compiles them at
start-up and nothing after its first step; a strict run stops on a shape
outside the set; bad runtime fields are refused before any compute."""

import json
import pathlib

import pytest

from mgrpo_jax.runtime.config_checks import ConfigError
from mgrpo_jax.runtime.programs import ShapeError
from mgrpo_jax.train import compiled, trainer
from mgrpo_jax.train.packing import closed_lengths
from trainer_test_utils import small_closed_set, tiny_config


def _closed(tmp_path, **train):
  return small_closed_set(tiny_config(tmp_path, **train))


def _records(config):
  path = pathlib.Path(config.run_dir) / "all" / "metrics.jsonl"
  return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_strict_closed_run_compiles_nothing_after_its_first_step(tmp_path):
  config = _closed(tmp_path, steps=2, eval_every=1)
  lines = []
  trainer.run(config, log=lines.append)
  assert any(line.startswith("start-up: compiled ") for line in lines)
  steps = {}
  for r in _records(config):
    steps.setdefault(r["step"], {}).update(r)
  # 5 lengths (256, 384, 512, 768, 1024) x the update (mu = 1, no KL: no
  # separate log-prob pass).
  assert steps[1]["startup/programs"] == 2 * 15 + 2 * 5
  assert steps[1]["startup/programs/main_sampler"] == 15
  assert steps[1]["startup/programs/sub_learner"] == 5
  assert steps[1]["startup/compile_seconds"] > 0
  counts = [steps[s]["jit/compilations"] for s in (1, 2)]
  assert counts[0] == counts[1], counts  # Step 2 (and its evaluation).


def test_a_strict_run_stops_on_a_shape_outside_its_set(tmp_path,
                                                       monkeypatch):
  config = _closed(tmp_path, steps=2)
  # The learners compile only 16-token batches: the first real batch is
  # longer.
  monkeypatch.setattr(compiled, "learner_lengths", lambda learner: [16])
  config.learner.main.min_len = 16
  config.learner.sub.min_len = 16
  longer = "|".join(map(str, closed_lengths(16, 1024)[1:]))
  with pytest.raises(ShapeError, match=r"program 'main update': .*\(\(\d+, "
                     rf"4, ({longer})\), 'int32'\).* outside the "
                     r"\d+ program\(s\) compiled at start-up"):
    trainer.run(config, log=lambda line: None)
  checkpoints = pathlib.Path(config.run_dir) / "checkpoints"
  assert (checkpoints / "main" / "0").is_dir()  # The warm start, kept.


@pytest.mark.parametrize("field, value, message", [
    ("shapes", "half", "one of ['closed', 'open']"),
    ("decode_windows", 0, "an integer >= 1"),
    ("prefill_chunk", 8, "an integer >= 16"),
    ("prefill_chunk", 4096, "at most 1024, the smallest "
     "agents.<agent>.context_tokens"),
])
def test_bad_runtime_fields_are_refused_before_any_compute(
    tmp_path, field, value, message):
  config = _closed(tmp_path)
  config.runtime[field] = value
  with pytest.raises(ConfigError, match=(
      rf"config.runtime.{field}={value!r}: expected {message}").replace(
          "[", r"\[").replace("]", r"\]")):
    trainer.run(config, log=lambda line: None)
  assert not pathlib.Path(config.run_dir).exists()


def test_strict_needs_closed_and_closed_needs_alignment(tmp_path):
  config = tiny_config(tmp_path)
  config.runtime.strict_shapes = True
  with pytest.raises(ConfigError, match="config.runtime.strict_shapes=True: "
                     "expected False with runtime.shapes='open'"):
    trainer.run(config, log=lambda line: None)
  config = _closed(tmp_path)
  config.align.d_max = 0
  with pytest.raises(ConfigError, match=r"config.align.d_max=0: expected at "
                     r"least 1 with runtime.shapes='closed'"):
    trainer.run(config, log=lambda line: None)
  assert not pathlib.Path(config.run_dir).exists()
