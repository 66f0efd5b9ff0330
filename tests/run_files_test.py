"""A run directory's files, local and gs:// (runtime/run_files.py): the
helpers on a local folder, and a whole training run whose run_dir is a
bucket (a local GCS emulator, tests/gcs_emulator.py; skipped without the
test extras), evaluated from the bucket."""

import importlib.util
import json
import subprocess
import sys

import pytest

import gcs_emulator
from mgrpo_jax.runtime import run_files
from processes_test_utils import child_env
from trainer_test_utils import CHILD_CONFIG, ROOT, tiny_config


def test_local_files_append_and_read(tmp_path):
  path = tmp_path / "a" / "b.jsonl"
  assert run_files.read_text(path) is None
  run_files.append_text(path, "one\n")
  run_files.append_text(str(path), "two\n")
  assert run_files.read_text(path) == "one\ntwo\n"
  assert not run_files.is_remote(path)
  assert run_files.is_remote("gs://bucket/run")
  assert str(run_files.path_of("gs://bucket/run/x")) == "gs://bucket/run/x"
  assert str(run_files.path_of("rel")).startswith("/")


# Runs in a child (gcsfs reads the emulator's address when first imported):
# everything the run wrote, read back from the bucket.
_READ_BACK = """
import json, sys
from etils import epath
from mgrpo_jax.runtime.metrics import MetricsWriter
from mgrpo_jax.train.outcomes import read_outcomes
run = sys.argv[1]
records = MetricsWriter.read(run + "/all")
print(json.dumps({
    "steps": [r["step"] for r in records],
    "accuracy": [r["eval/accuracy"] for r in records if "eval/accuracy" in r],
    "outcomes": sorted(read_outcomes(run + "/all")),
    "card": (epath.Path(run) / "checkpoints/model/config.json").exists(),
    "checkpoints": sorted(p.name for p in
                          (epath.Path(run) / "checkpoints/main").iterdir()),
    "store": sorted(p.name for p in (epath.Path(run) / "store/steps").iterdir()),
    "events": len(list((epath.Path(run) / "all/tensorboard").iterdir())),
}))
"""


def test_a_run_keeps_everything_in_a_bucket(tmp_path):
  for module in ("gcp_storage_emulator", "gcsfs"):
    if importlib.util.find_spec(module) is None:
      pytest.skip(f"{module} is not installed (pip install -e .[test])")
  config = tiny_config(tmp_path, steps=2)
  config.run_dir = "gs://mgrpo-run/run"
  path = tmp_path / "config.py"
  path.write_text(CHILD_CONFIG.format(text=config.to_json()))
  with gcs_emulator.serve(bucket="mgrpo-run") as emulator:
    env = child_env(**emulator.env, MGRPO_JAX_CACHE=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-m", "mgrpo_jax.main",
                          "--config", str(path)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert ("metrics: gs://mgrpo-run/run/all/metrics.jsonl"
            in run.stdout + run.stderr)
    read = subprocess.run([sys.executable, "-c", _READ_BACK,
                           config.run_dir], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert read.returncode == 0, read.stderr[-3000:]
    # The evaluation CLI reads the trained agents from the bucket.
    scored = subprocess.run(
        [sys.executable, "-m", "mgrpo_jax.evaluate", "--config", str(path),
         "--checkpoint", f"{config.run_dir}/checkpoints/main",
         "--output_dir", str(tmp_path / "eval")], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=600)
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert (f"loaded {config.run_dir}/checkpoints/main: the trained weights "
            "of step 2") in scored.stdout + scored.stderr
  got = json.loads(read.stdout.strip().splitlines()[-1])
  evaluated = json.loads((tmp_path / "eval" / "metrics.json").read_text())
  assert evaluated["metrics"]["pass@1"] == got["accuracy"][-1]
  assert got["steps"] == [0, 0, 1, 2]  # SFT, evaluation, the two steps.
  assert len(got["accuracy"]) == 2 and got["outcomes"] == [0, 2]
  assert got["card"] and got["events"] >= 1
  assert "0" in got["checkpoints"] and "2" in got["checkpoints"]
  assert got["store"] == ["0000000000", "0000000001"]
