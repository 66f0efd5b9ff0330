"""--role=main and --role=sub as two processes that share only the store."""

import os
import pathlib
import subprocess
import sys

import pytest

from mgrpo_jax.runtime.metrics import MetricsWriter

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = """
import pathlib, sys
sys.path.insert(0, {tests!r})
from trainer_test_utils import tiny_config

def get_config():
  return tiny_config(pathlib.Path({tmp!r}), steps=3)
"""


@pytest.mark.slow  # About a minute on 2 cores: two processes, each compiling.
def test_two_processes_train_through_the_store(tmp_path):
  config = tmp_path / "config.py"
  config.write_text(CONFIG.format(tests=str(ROOT / "tests"),
                                  tmp=str(tmp_path)))
  env = dict(os.environ, MGRPO_JAX_CACHE=str(tmp_path / "cache"),
             JAX_PLATFORMS="cpu")
  procs = {role: subprocess.Popen(
      [sys.executable, "-m", "mgrpo_jax.main", "--config", str(config),
       f"--role={role}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True) for role in ("sub", "main")}
  outputs = {}
  for role, proc in procs.items():
    outputs[role], _ = proc.communicate(timeout=900)
  for role, proc in procs.items():
    assert proc.returncode == 0, f"{role}:\n{outputs[role][-3000:]}"
  run = tmp_path / "run"
  main = {r["step"]: r for r in MetricsWriter.read(run / "main")
          if "weights/sub_checksum" in r}
  sub = {r["step"]: r for r in MetricsWriter.read(run / "sub")
         if "weights/published_checksum" in r}
  # The sub side trained on exactly the main side's steps, once each.
  assert sorted(main) == sorted(sub) == [1, 2, 3]
  for step in (1, 2, 3):
    assert sub[step]["sub/sequences"] >= 0
    # Sync staleness: rollout n used the weights the sub side published
    # after update n-1, bit for bit (the checksums sum the weights' bit patterns exactly).
    assert main[step]["weights/sub_step"] == step - 1
    if step > 1:
      assert main[step]["weights/sub_checksum"] == (
          sub[step - 1]["weights/published_checksum"])
  assert not (run / "all").exists()
