"""`python -m mgrpo_jax.main` as a user runs it, and the config file's form."""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_main(*args):
  return subprocess.run(
      [sys.executable, "-m", "mgrpo_jax.main", "--config",
       "configs/toy.py", *args],
      cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_main_runs_and_logs_progress():
  result = run_main("--config.train.steps=20", "--config.train.log_every=10")
  assert result.returncode == 0, result.stderr[-2000:]
  assert "step 10:" in result.stderr and "step 20:" in result.stderr
  assert re.search(r"done: greedy accuracy [0-9.]+", result.stderr)


def test_bad_override_fails_with_the_field_named():
  result = run_main("--config.align.d_max=0")
  assert result.returncode != 0
  assert "config.align.d_max=0: expected an integer >= 1" in result.stderr
  assert "Traceback" not in result.stderr


def test_every_config_field_has_a_comment():
  for path in sorted((ROOT / "configs").glob("*.py")):
    for number, line in enumerate(path.read_text().splitlines(), 1):
      if re.match(r"\s*config(\.\w+)+ = ", line) and "ConfigDict()" not in line:
        assert "#" in line, f"{path.name}:{number} has no comment: {line}"
