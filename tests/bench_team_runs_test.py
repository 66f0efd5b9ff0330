"""bench.team_runs: a pretrained team before and after training, per data
source and seed (the runs themselves are `python -m mgrpo_jax.main`)."""

import json
import subprocess
import sys

from trainer_test_utils import ROOT

from mgrpo_jax.bench import team_runs


def test_a_child_is_measured_alone(tmp_path):
  """The wrapper's one child: its exit code, seconds and peak memory."""
  out = subprocess.check_output([
      sys.executable, "-m", "mgrpo_jax.bench.team_runs", "--child",
      f"--out={tmp_path / 'child.log'}", "--", sys.executable, "-c",
      "x = bytearray(300 * 2**20); print('held')"], cwd=ROOT)
  result = json.loads(out)
  assert result["code"] == 0 and result["seconds"] > 0
  assert 300 < result["peak_mib"] < 2000
  assert (tmp_path / "child.log").read_text() == "held\n"


def test_each_run_gets_its_flags(tmp_path):
  flags = team_runs.overrides("musique", "untrained", 1, tmp_path)
  assert f"--config.run_dir={tmp_path / 'musique-untrained-seed1'}" in flags
  assert "--config.sft.steps=0" in flags and "--config.seed=1" in flags
  assert "--config.sft.demonstrations=gold" in flags
  assert (f"--config.data.test={tmp_path / 'world_files' / 'musique'}"
          "/test.jsonl") in flags
  trained = team_runs.overrides("synthetic", "trained", 0, tmp_path)
  assert not any("sft" in f or "data" in f for f in trained)


def _metrics(folder, by_step):
  (folder / "all").mkdir(parents=True)
  (folder / "all" / "metrics.jsonl").write_text("".join(
      json.dumps({"step": s, "test/accuracy": a}) + "\n"
      for s, a in by_step.items()) + json.dumps({"step": 3}) + "\n")


def test_rows_read_the_runs_test_accuracy(tmp_path):
  _metrics(tmp_path / "synthetic-untrained-seed0", {0: 0.0, 1: 0.0})
  _metrics(tmp_path / "synthetic-trained-seed0", {0: 0.25, 5: 0.3, 10: 0.4})
  row = team_runs.row("synthetic", 0, {"peak_mib": 1024.0},
                      {"seconds": 1800.0, "peak_mib": 3072.0}, tmp_path)
  assert row == {"data": "synthetic", "seed": 0, "untrained": 0.0,
                 "warm_start": 0.25, "mgrpo": 0.4, "steps": 10,
                 "seconds": 1800.0, "peak_gib": 3.0}
  text = team_runs.table([row])
  assert text.startswith("| data | seed |")  # A table README can quote.
  assert "| synthetic | 0 | 0.000 | 0.250 | 0.400 (step 10) | 30 min | " \
      "3.0 GiB |" in text


def test_finished_rows_are_the_pairs_whose_two_runs_finished(tmp_path):
  for name in ("synthetic-untrained-seed0", "synthetic-trained-seed0",
               "musique-untrained-seed0", "musique-trained-seed0",
               "synthetic-untrained-seed1"):
    _metrics(tmp_path / name, {0: 0.0, 10: 0.5})
  ok = {"code": 0, "seconds": 60.0, "peak_mib": 1024.0}
  record = {"runs": {"synthetic-untrained-seed0": ok,
                     "synthetic-trained-seed0": ok,
                     "musique-untrained-seed0": ok,
                     "musique-trained-seed0": {**ok, "code": 1},
                     "synthetic-untrained-seed1": ok}}
  rows = team_runs.finished_rows(record, tmp_path)
  assert [(r["data"], r["seed"]) for r in rows] == [("synthetic", 0)]
