"""What `python -m mgrpo_jax.main` prints: the project's lines, a progress
bar and a summary; library logs only with --verbosity=1 (runtime/logs.py)."""

import logging
import os
import re
import subprocess
import sys

import pytest
from absl import logging as absl_logging

from mgrpo_jax.runtime import logs
from trainer_test_utils import CHILD_CONFIG, ROOT, tiny_config

ABSL_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")  # "I1204 18:28:38".


def _main(config_file, cache, *flags):
  """stdout and stderr of `python -m mgrpo_jax.main`, one string."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", MGRPO_JAX_CACHE=str(cache))
  result = subprocess.run(
      [sys.executable, "-m", "mgrpo_jax.main", "--config", str(config_file),
       *flags], cwd=ROOT, env=env, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, timeout=600)
  assert result.returncode == 0, result.stdout[-3000:]
  return result.stdout


@pytest.mark.slow  # 17 s: two whole runs in child processes.
def test_a_run_prints_its_own_lines_and_libraries_only_when_asked(tmp_path):
  config = tiny_config(tmp_path, steps=2, eval_every=2)
  config_file = tmp_path / "config.py"
  config_file.write_text(CHILD_CONFIG.format(text=config.to_json()))
  out = _main(config_file, tmp_path / "cache")
  lines = out.splitlines()  # Newline-terminated lines (a redraw has none).
  evaluations = 1 + config.train.steps // config.train.eval_every  # + step 0.
  bar_lines = 1  # Not a terminal: a line every 10 steps and at the end.
  expected = (1  # world: built ...
              + 1 + config.sft.steps  # warm start: SFT of ..., each step.
              + evaluations + bar_lines
              + 2)  # done: ..., metrics: ... checkpoints: ...
  assert len(lines) <= expected, out
  assert not [line for line in lines if ABSL_LINE.match(line)], out
  assert "Downloading and preparing" not in out
  assert "\r" not in out  # The bar redraws only on a terminal.
  built = "world: built 40 entities, 8/2/2 train/validation/test questions"
  assert sum(line.startswith(built) for line in lines) == 1
  assert re.search(r"^step 0: eval/accuracy=\S+ eval/format=\S+ "
                   r"eval/sub_calls=\S+$", out, re.M), out
  assert re.search(r"^step 2: eval/accuracy=", out, re.M), out
  assert re.search(r"^train: 100%.*2/2", out, re.M), out
  assert re.search(r"^done: 2 steps in \d+ s, final eval/accuracy [0-9.]+$",
                   out, re.M), out
  assert f"{config.run_dir}/all/metrics.jsonl" in out
  # The same run again with --verbosity=1: the finished run is resumed
  # (nothing left to train), the world and warm start come from the cache;
  # Orbax, tfds and absl now log their INFO lines too.
  again = _main(config_file, tmp_path / "cache", "--verbosity=1")
  assert "world: built" not in again  # Read, not built.
  assert "warm start: reusing" in again
  assert len(again.splitlines()) > len(lines), again
  assert [line for line in again.splitlines() if ABSL_LINE.match(line)]


def test_configure_quiets_libraries_and_verbosity_1_brings_them_back(capsys):
  project = logging.getLogger(logs.PROJECT_LOGGER)
  libraries = {name: logging.getLogger(name).level
               for name in logs.LIBRARY_LOGGERS}
  verbosity = absl_logging.get_verbosity()
  try:
    assert logs.configure(0) is False
    assert logging.getLogger("orbax").level == logging.WARNING
    assert absl_logging.get_verbosity() == absl_logging.WARNING
    logs.say("world: built")
    logs.detail("kept back")
    logs.configure(0)  # Twice: still one handler, one line.
    logs.say("step 0: eval/accuracy=0")
    assert capsys.readouterr().err == "world: built\nstep 0: eval/accuracy=0\n"
    assert logs.configure(1) is True
    assert logging.getLogger("orbax").level == logging.NOTSET
    assert absl_logging.get_verbosity() == 1
    logs.detail("shown")
    assert capsys.readouterr().err == "shown\n"
  finally:
    project.handlers.clear()
    project.propagate = True
    project.setLevel(logging.NOTSET)
    for name, level in libraries.items():
      logging.getLogger(name).setLevel(level)
    absl_logging.get_absl_handler().filters.clear()
    absl_logging.set_verbosity(verbosity)
