"""Draws a run's training curves: `python -m mgrpo_jax.plot RUN_DIR`.

  python -m mgrpo_jax.plot RUN_DIR [--out DIR] [--smoothing 0.6]

Reads RUN_DIR/metrics.jsonl (runtime/metrics.py) and writes PNGs to DIR
(default RUN_DIR/plots): one per panel, and overview.png with every panel.
Panels are chosen by metric name, so new metrics need no code here: every
`time/*` metric goes in the step-time panel, every other metric in the panel
of its last name part (`main/reward` and `sub/reward` in "reward",
`main/clip_fraction` and `sub/clip_fraction` in "clip_fraction", ...).
Metrics of METRICS_DOC absent from the file are listed in a note. When a
step appears more than once (a resumed run repeats the steps after its
checkpoint), its later values win.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import sys
from typing import Sequence

from absl import app
from absl.flags import argparse_flags
import matplotlib

matplotlib.use("Agg")  # No display needed; must precede pyplot's import.
# pylint: disable=g-import-not-at-top,g-bad-import-order
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from mgrpo_jax.runtime.metrics import (JSONL_NAME, METRICS_DOC,  # noqa: E402
                                        RESERVED_FIELDS, read_jsonl)

# Panels in drawing order, with their titles; others follow alphabetically.
PANEL_TITLES = {
    "reward": "Reward",
    "accuracy": "Accuracy",
    "format": "Well-formed fraction",
    "calls_per_rollout": "Sub-agent calls per rollout",
    "clip_fraction": "Clip fraction",
    "approx_kl": "KL of the update (old vs new policy)",
    "ref_kl": "KL to the reference",
    "loss": "Loss",
    "grad_norm": "Gradient norm",
    "time": "Step time by phase (s)",
}


def panel_of(name: str) -> str:
  """The panel a metric is drawn in: "time" for time/*, else its last part."""
  if name.startswith("time/"):
    return "time"
  return name.rsplit("/", 1)[-1]


@dataclasses.dataclass
class Series:
  steps: np.ndarray  # int64 [N], increasing.
  values: np.ndarray  # float64 [N]; NaN where the value was null / NaN.


@dataclasses.dataclass
class PlotResult:
  paths: list[pathlib.Path]  # PNGs written, overview.png last.
  notes: list[str]  # What was skipped, and why.


def series_by_metric(records: Sequence[dict]) -> tuple[dict[str, Series],
                                                        list[str]]:
  """Numeric series per metric name (later records win a repeated step)."""
  by_name: dict[str, dict[int, float]] = {}
  non_numeric: set[str] = set()
  for record in records:
    step = record["step"]
    for name, value in record.items():
      if name in RESERVED_FIELDS:
        continue
      if value is None:
        value = math.nan
      if not isinstance(value, (int, float)):  # bool is an int: 0 / 1.
        non_numeric.add(name)
        continue
      by_name.setdefault(name, {})[step] = float(value)
  series = {}
  for name, points in by_name.items():
    steps = np.array(sorted(points), dtype=np.int64)
    series[name] = Series(steps, np.array([points[s] for s in steps]))
  skipped = sorted(non_numeric - set(series))
  return series, skipped


def _smooth(values: np.ndarray, weight: float) -> np.ndarray:
  """TensorBoard-style debiased exponential moving average; NaNs skipped."""
  out = np.full_like(values, math.nan)
  mean, norm = 0.0, 0.0
  for i, v in enumerate(values):
    if math.isfinite(v):
      mean = weight * mean + (1 - weight) * v
      norm = weight * norm + (1 - weight)
    if norm > 0:
      out[i] = mean / norm
  return out


_SPARSE = 30  # Series with at most this many points are drawn as markers.


def _draw_panel(ax, panel: str, names: Sequence[str],
                series: dict[str, Series], smoothing: float) -> None:
  for name in names:
    s = series[name]
    if len(s.steps) <= _SPARSE:  # E.g. eval/*: points, never smoothed.
      ax.plot(s.steps, s.values, marker="o", markersize=3, label=name)
    elif smoothing > 0:
      (raw,) = ax.plot(s.steps, s.values, alpha=0.25)
      ax.plot(s.steps, _smooth(s.values, smoothing), color=raw.get_color(),
              label=name)
    else:
      ax.plot(s.steps, s.values, label=name)
  ax.set_title(PANEL_TITLES.get(panel, panel))
  ax.set_xlabel("step")
  ax.grid(alpha=0.3)
  ax.legend(fontsize="small")


def plot_run(run_dir: str | os.PathLike, out_dir: str | os.PathLike | None =
             None, *, smoothing: float = 0.0) -> PlotResult:
  """Draws RUN_DIR/metrics.jsonl into PNGs under out_dir (RUN_DIR/plots)."""
  if not 0.0 <= smoothing < 1.0:
    raise ValueError(f"smoothing={smoothing}: expected 0 <= smoothing < 1.")
  run_dir = pathlib.Path(run_dir)
  if not run_dir.is_dir():
    raise FileNotFoundError(f"run directory {str(run_dir)!r} does not exist.")
  path = run_dir / JSONL_NAME
  records, bad = read_jsonl(path)
  notes = []
  if bad:
    notes.append(f"{path}: skipped torn line(s) {bad}.")
  series, non_numeric = series_by_metric(records)
  if not series:
    raise ValueError(f"{str(path)!r} holds no metrics (records: "
                     f"{len(records)}, torn lines: {len(bad)}).")
  if non_numeric:
    notes.append(f"not numeric, not drawn: {', '.join(non_numeric)}.")
  empty = [name for name in sorted(series)
           if not np.isfinite(series[name].values).any()]
  if empty:
    notes.append(f"no finite value (null / NaN / inf): {', '.join(empty)}.")
  absent = [name for name in METRICS_DOC if name not in series]
  if absent:
    notes.append(f"not in {JSONL_NAME}, skipped: {', '.join(absent)}.")
  panels: dict[str, list[str]] = {}
  for name in sorted(series):
    panels.setdefault(panel_of(name), []).append(name)
  order = [p for p in PANEL_TITLES if p in panels]
  order += sorted(p for p in panels if p not in PANEL_TITLES)

  out_dir = pathlib.Path(out_dir) if out_dir is not None else run_dir / "plots"
  out_dir.mkdir(parents=True, exist_ok=True)
  paths = []
  for panel in order:
    fig, ax = plt.subplots(figsize=(6, 4))
    _draw_panel(ax, panel, panels[panel], series, smoothing)
    fig.tight_layout()
    paths.append(out_dir / f"{panel}.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
  cols = min(3, len(order))
  rows = math.ceil(len(order) / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.5 * rows),
                           squeeze=False)
  for ax, panel in zip(axes.flat, order):
    _draw_panel(ax, panel, panels[panel], series, smoothing)
  for ax in list(axes.flat)[len(order):]:
    ax.set_visible(False)
  fig.suptitle(str(run_dir))
  fig.tight_layout()
  paths.append(out_dir / "overview.png")
  fig.savefig(paths[-1], dpi=80)
  plt.close(fig)
  return PlotResult(paths, notes)


def parse_flags(argv: Sequence[str]):
  parser = argparse_flags.ArgumentParser(
      description="Draws a run's metrics.jsonl as PNG curves.")
  parser.add_argument("run_dir", help="Run directory holding metrics.jsonl.")
  parser.add_argument("--out", default=None,
                      help="Where PNGs go (default RUN_DIR/plots).")
  parser.add_argument("--smoothing", type=float, default=0.0,
                      help="Exponential moving-average weight in [0, 1) "
                           "(0: raw curves; else raw faint, smoothed bold).")
  return parser.parse_args(argv[1:])


def main(args) -> None:
  try:
    result = plot_run(args.run_dir, args.out, smoothing=args.smoothing)
  except (FileNotFoundError, ValueError) as e:
    sys.exit(f"error: {e}")
  for note in result.notes:
    print(f"note: {note}")
  print(f"wrote {len(result.paths)} PNGs to {result.paths[0].parent}")


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
