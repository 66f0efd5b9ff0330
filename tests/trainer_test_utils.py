"""A tiny-team trainer config shared by the trainer and two-process tests."""

import json
import pathlib
import time

import pytest

from mgrpo_jax.runtime.config_checks import load_config_file

ROOT = pathlib.Path(__file__).resolve().parents[1]


def learner_config(**overrides):
  """A LearnerConfig: configs/default.py's `learner.main` with `overrides`
  (the config file holds the one default of every field)."""
  from mgrpo_jax.train.learner import LearnerConfig
  section = load_config_file(ROOT / "configs" / "default.py").learner.main
  return LearnerConfig(**{**section.to_dict(), **overrides})


def tiny_config(tmp_path, **train):
  """configs/default.py shrunk to seconds per step; `train` overrides
  fields of config.train."""
  config = load_config_file(ROOT / "configs" / "default.py")
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
  # Each test compiles only the shapes it meets; the closed set (the
  # default) has its own tests (compiled_test.py, multihost_test.py).
  config.runtime.shapes = "open"
  config.train.update(train)
  return config


def small_closed_set(config):
  """`config` on a strict closed set of programs kept small (one window
  each, prefill calls of at most 64 tokens: 15 sampler programs per agent
  for tiny_config, sampling/shapes.py)."""
  config.runtime.shapes = "closed"
  config.runtime.strict_shapes = True
  config.runtime.decode_windows = 1
  config.runtime.prefill_windows = 1
  config.runtime.prefill_chunk = 64
  return config


# A config file for a child process: the same tiny config, from JSON.
CHILD_CONFIG = """
import json, ml_collections
def get_config():
  return ml_collections.ConfigDict(json.loads({text!r}))
"""

# Differ between two identical runs: clocks, speeds and the process's own
# compilation count (a resumed process compiles its functions afresh).
UNTIMED = ("time", "time/", "rollout/tokens_per_second", "jit/")


def by_step(records):
  """{step: every metric logged for it}; a step logged again (a resumed
  run redoing the step it was killed in) keeps its newest values."""
  out = {}
  for r in records:
    out.setdefault(r["step"], {}).update(
        {k: v for k, v in r.items() if not k.startswith(UNTIMED)})
  return out


def logged_step(path: pathlib.Path) -> int:
  """The newest step in a metrics file being written (-1: none yet)."""
  newest = -1
  if path.is_file():
    for line in path.read_text().splitlines():
      try:
        newest = max(newest, json.loads(line)["step"])
      except (ValueError, KeyError):
        continue  # A line being written.
  return newest


def wait_for(condition, proc, log_file, what: str, timeout_s=600.0):
  start = time.monotonic()
  while not condition():
    if proc.poll() is not None:
      pytest.fail(f"the run ended (rc {proc.returncode}) before {what}:\n"
                  f"{log_file.read_text()[-3000:]}")
    if time.monotonic() - start > timeout_s:
      pytest.fail(f"no {what} after {timeout_s} s:\n"
                  f"{log_file.read_text()[-3000:]}")
    time.sleep(0.05)


def run_child(config, tmp_path, name: str, cache=None):
  """`python -m mgrpo_jax.main` on `config` in a child process with the
  cache `cache` (default: its own); returns (process, log file). Its log
  goes to a file: a pipe nobody drains would block it."""
  import os
  import subprocess
  import sys
  config_file = tmp_path / f"{name}_config.py"
  config_file.write_text(CHILD_CONFIG.format(text=config.to_json()))
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=8",
             MGRPO_JAX_CACHE=str(cache or tmp_path / f"{name}_cache"))
  log_file = tmp_path / f"{name}.log"
  with open(log_file, "w") as out:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mgrpo_jax.main", "--config",
         str(config_file)], cwd=ROOT, env=env, stdout=out,
        stderr=subprocess.STDOUT)
  return proc, log_file


def sigkill_after(config, tmp_path, step: int, cache=None, also=None):
  """Runs `config` in a child and SIGKILLs it once step `step` is logged
  and `also()` (if given) holds; a step's checkpoints come right after its
  metrics, so without `also` the kill may land before or after them.
  Returns the figures logged before the kill."""
  import signal
  from mgrpo_jax.runtime.metrics import MetricsWriter
  proc, log_file = run_child(config, tmp_path, "killed", cache)
  metrics_file = pathlib.Path(config.run_dir) / "all" / "metrics.jsonl"
  try:
    wait_for(lambda: logged_step(metrics_file) >= step and (
        also is None or also()), proc, log_file, f"step {step} logged")
  except BaseException:
    proc.kill()
    raise
  proc.send_signal(signal.SIGKILL)
  proc.wait(timeout=60)
  assert proc.returncode == -signal.SIGKILL
  return by_step(MetricsWriter.read(metrics_file.parent))


def assert_same_figures(expected: dict, got: dict) -> None:
  """Every figure of `expected` (by step) is logged in `got`, equal
  (except whether the warm start came from the cache)."""
  for step, figures in expected.items():
    assert step in got, step
    for key, value in figures.items():
      if key == "sft/cached":
        continue
      assert key in got[step], (step, key)
      assert got[step][key] == pytest.approx(value, rel=1e-5, abs=1e-7), (
          step, key, got[step][key], value)
