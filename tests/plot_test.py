"""plot: metrics.jsonl -> PNG curves, as a function and as a command."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from mgrpo_jax import plot
from mgrpo_jax.runtime.metrics import JSONL_NAME, MetricsWriter

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ROOT = pathlib.Path(__file__).resolve().parents[1]


def assert_png(path: pathlib.Path) -> None:
  data = path.read_bytes()
  assert data[:8] == PNG_MAGIC, path
  assert len(data) > 1024, path


def write_run(run_dir: pathlib.Path, steps: int = 6) -> None:
  rng = np.random.default_rng(0)
  with MetricsWriter(run_dir, tensorboard=False) as writer:
    for step in range(1, steps + 1):
      writer.write(step, {
          "main/reward": float(rng.uniform()),
          "sub/reward": float(rng.uniform()),
          "main/accuracy": step / steps, "sub/calls_per_rollout": 2.0,
          "main/clip_fraction": 0.01, "sub/clip_fraction": float("nan"),
          "time/rollout": 3.0, "time/step": 4.0, "main/entropy": 1.0,
          "phase": "train"})
    writer.write(steps, {"eval/accuracy": 0.5})  # Same step, another call.


def test_panels_group_metrics_by_name():
  assert plot.panel_of("time/sub_update") == "time"
  assert plot.panel_of("main/clip_fraction") == "clip_fraction"
  assert plot.panel_of("sub/clip_fraction") == "clip_fraction"
  assert plot.panel_of("eval/accuracy") == "accuracy"


def test_plot_run_writes_a_png_per_panel(tmp_path):
  write_run(tmp_path, steps=40)  # Dense: raw faint, smoothed bold.
  result = plot.plot_run(tmp_path, smoothing=0.5)
  names = [p.name for p in result.paths]
  assert names == ["reward.png", "accuracy.png", "calls_per_rollout.png",
                   "clip_fraction.png", "time.png", "entropy.png",
                   "overview.png"]
  for path in result.paths:
    assert path.parent == tmp_path / "plots"
    assert_png(path)
  notes = " ".join(result.notes)
  assert "main/approx_kl" in notes and "time/store" in notes  # Absent.
  assert "phase" in notes  # Not numeric.
  assert "no finite value (null / NaN / inf): sub/clip_fraction." in notes
  assert "main/reward," not in notes


def test_later_records_win_a_repeated_step(tmp_path):
  with MetricsWriter(tmp_path, tensorboard=False) as writer:
    # Steps 2 and 3 again: resumed from a step-1 checkpoint.
    for i, step in enumerate((1, 2, 3, 2, 3, 4)):
      writer.write(step, {"main/reward": float(i)})
    writer.write(4, {"eval/accuracy": 0.5})
  series, _ = plot.series_by_metric(MetricsWriter.read(tmp_path))
  np.testing.assert_array_equal(series["main/reward"].steps, [1, 2, 3, 4])
  np.testing.assert_array_equal(series["main/reward"].values, [0, 3, 4, 5])
  np.testing.assert_array_equal(series["eval/accuracy"].steps, [4])


def test_smoothing_skips_nan():
  out = plot._smooth(np.array([np.nan, 1.0, np.nan, 3.0]), 0.5)
  assert np.isnan(out[0]) and out[1] == 1.0 and out[2] == 1.0
  assert out[3] == pytest.approx((0.25 * 1 + 0.5 * 3) / 0.75)


def test_bad_inputs_are_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="missing"):
    plot.plot_run(tmp_path / "missing")
  with pytest.raises(FileNotFoundError, match=JSONL_NAME):
    plot.plot_run(tmp_path)
  (tmp_path / JSONL_NAME).write_text("")
  with pytest.raises(ValueError, match="holds no metrics"):
    plot.plot_run(tmp_path)
  (tmp_path / JSONL_NAME).write_text('{"step": 1, "main/rew\n')
  with pytest.raises(ValueError, match="torn lines: 1"):
    plot.plot_run(tmp_path)
  with pytest.raises(ValueError, match="smoothing=1.0"):
    plot.plot_run(tmp_path, smoothing=1.0)


def test_torn_lines_are_skipped_with_a_note(tmp_path):
  write_run(tmp_path, steps=3)
  with open(tmp_path / JSONL_NAME, "a") as f:
    f.write('{"step": 4, "main/rew')
  result = plot.plot_run(tmp_path, tmp_path / "out")
  assert any("torn line(s) [5]" in note for note in result.notes)
  assert_png(tmp_path / "out" / "overview.png")


def test_main_as_a_function(tmp_path, capsys):
  write_run(tmp_path)
  plot.main(plot.parse_flags(["plot", str(tmp_path), "--out",
                              str(tmp_path / "png")]))
  out = capsys.readouterr().out
  assert "note: not in metrics.jsonl" in out and "wrote 7 PNGs" in out
  assert_png(tmp_path / "png" / "reward.png")
  with pytest.raises(SystemExit, match="does not exist"):
    plot.main(plot.parse_flags(["plot", str(tmp_path / "nope")]))


def test_command_line(tmp_path):
  (tmp_path / JSONL_NAME).write_text("".join(
      json.dumps({"step": s, "time": 0.0, "main/reward": s / 10,
                  "time/step": 1.0}) + "\n" for s in range(5)))
  done = subprocess.run(
      [sys.executable, "-m", "mgrpo_jax.plot", str(tmp_path), "--out",
       str(tmp_path / "curves")], cwd=ROOT, capture_output=True, text=True,
      timeout=120, check=False)
  assert done.returncode == 0, done.stderr
  assert "wrote 3 PNGs" in done.stdout
  for name in ("reward.png", "time.png", "overview.png"):
    assert_png(tmp_path / "curves" / name)
