"""`python -m mgrpo_jax.main` as a user runs it, and the config file's form."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_main(*args):
  return subprocess.run(
      [sys.executable, "-m", "mgrpo_jax.main", "--config",
       "configs/toy.py", *args],
      cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_main_runs_and_logs_progress():
  result = run_main("--config.train.steps=20", "--config.train.eval_every=10")
  assert result.returncode == 0, result.stderr[-2000:]
  assert "step 10:" in result.stderr and "step 20:" in result.stderr
  assert re.search(r"done: greedy accuracy [0-9.]+", result.stderr)
  # Project lines as they are; no absl INFO lines ("I1204 18:28:38.4 ...")
  # without --verbosity=1 (runtime/logs.py).
  assert re.search(r"^step 10: ", result.stderr, re.M)
  assert not re.search(r"^I\d{4} ", result.stderr, re.M), result.stderr


def test_bad_override_fails_with_the_field_named():
  result = run_main("--config.align.d_max=0")
  assert result.returncode != 0
  assert "config.align.d_max=0: expected an integer >= 1" in result.stderr
  assert "Traceback" not in result.stderr


REFUSED = [  # (arguments after --config configs/default.py, stderr line)
    (["--config.train.stepz=5"], "error: unknown config field "
     "config.train.stepz: did you mean config.train.steps?"),
    (["--config.trian.steps=5"], "error: unknown config field config.trian: "
     "did you mean config.train?"),
    (["--config.task=agent"], "error: config.task='agent': expected one of "
     "['agents', 'toy_delegation']."),
    (["--config.train.group_size=1"], "error: config.train.group_size=1: "
     "expected an integer >= 2."),
    (["--config.learner.sub.off_policy=tokens"], "error: "
     "config.learner.sub.off_policy='tokens': expected one of ['none', "
     "'sequence', 'token']."),
    (["--config.train.steps=ten"], "error: flag --config.train.steps=ten: "),
    (["--role=both"], "error: --role='both': expected one of ['all', "
     "'main', 'sub'] (a sub-agent kind's role trains that kind)."),
    (["stray"], "error: unexpected arguments ['stray']"),
]


@pytest.mark.parametrize("args,line", REFUSED,
                         ids=[" ".join(args) for args, _ in REFUSED])
def test_a_bad_command_line_is_one_line_exit_2_and_writes_nothing(
    args, line, tmp_path):
  result = subprocess.run(
      [sys.executable, "-m", "mgrpo_jax.main", "--config",
       "configs/default.py", f"--config.run_dir={tmp_path / 'run'}", *args],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
      env={**os.environ, "MGRPO_JAX_CACHE": str(tmp_path / "cache")})
  assert result.returncode == 2, result.stderr[-2000:]
  assert line in result.stderr
  assert "Traceback" not in result.stderr
  assert len(result.stderr.strip().splitlines()) <= 3, result.stderr
  assert list(tmp_path.iterdir()) == []  # No run dir, store or cache.


def test_a_missing_config_file_is_named():
  result = subprocess.run(
      [sys.executable, "-m", "mgrpo_jax.main", "--config",
       "configs/defualt.py", "--config.train.steps=5"],
      cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert result.returncode == 2
  assert result.stderr.strip() == (
      "error: --config=configs/defualt.py: no such config file.")


def test_every_config_field_has_a_comment():
  for path in sorted((ROOT / "configs").glob("*.py")):
    for number, line in enumerate(path.read_text().splitlines(), 1):
      if re.match(r"\s*config(\.\w+)+ = ", line) and "ConfigDict()" not in line:
        assert "#" in line, f"{path.name}:{number} has no comment: {line}"
