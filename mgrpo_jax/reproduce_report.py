"""The figures of a reproduction (mgrpo_jax/reproduce.py): one run's result,
then a suite's JSON, markdown table and curves.

A run's result is read from its metrics file: at every evaluation step a
curve point (sampled tokens so far, test accuracy and the test split's
per-agent diagnostics, validation accuracy); its final figures are the last
point's. Test accuracy "at a budget" is the last point whose sampled tokens
do not exceed the budget; the budgets are fractions of the smallest total
any run of the suite sampled, so every arm is compared at equal cost.
"""

from __future__ import annotations

import json
import math
import pathlib
import statistics
from typing import Sequence

from mgrpo_jax import reproduce_analysis
from mgrpo_jax.bench.common import cpu_model
from mgrpo_jax.runtime.metrics import JSONL_NAME, read_jsonl
from mgrpo_jax.train.outcomes import read_outcomes

# Curve field -> the metric it comes from (test split, greedy).
CURVE_KEYS = {
    "test_accuracy": "test/accuracy",
    "validation_accuracy": "eval/accuracy",
    "sub_report_accuracy": "test/sub_report_accuracy",
    "sub_visit_rate": "test/sub_visit_rate",
    "sub_searches_per_report": "test/sub_searches_per_report",
    "visits_per_hop": "test/visits_per_hop",
    "delegations_hop1": "test/main_delegations_hop1",
    "delegations_hop2": "test/main_delegations_hop2",
}
BUDGET_FRACTIONS = (1 / 3, 2 / 3, 1.0)
OUTPUTS = {"main": "results", "clean": "clean", "ablations": "ablations"}
# Figures in the tables, final values (label, result key).
DIAGNOSTICS = (("sub report acc.", "sub_report_accuracy"),
               ("sub visit rate", "sub_visit_rate"),
               ("visits / hop", "visits_per_hop"),
               ("delegations / 2-hop q.", "delegations_hop2"))


def output_of(suite: str) -> str:
  """The JSON file a finished suite leaves in the output directory."""
  return f"{OUTPUTS[suite]}.json"


# Per-step training figures averaged into each curve point over the steps
# since the point before (None at step 0): curve field -> metric.
WINDOW_KEYS = {
    "train_accuracy": "main/accuracy",
    "main_informative_groups": "main/informative_groups",
    "sub_informative_groups": "sub/informative_groups",
    "main_grad_norm": "main/grad_norm",
    "sub_grad_norm": "sub/grad_norm",
}
# KL of each agent to its warm start at the point's step (learner log_ref_kl).
POINT_KEYS = {"main_ref_kl": "main/ref_kl", "sub_ref_kl": "sub/ref_kl"}


def run_result(run_dir: pathlib.Path, *, suite: str, name: str,
               seed: int) -> dict:
  """A finished run's figures (see the module docstring)."""
  path = pathlib.Path(run_dir) / "all" / JSONL_NAME
  records, _ = read_jsonl(path)
  by_step: dict[int, dict] = {}
  for record in records:  # A resumed run repeats steps: later ones win.
    by_step.setdefault(record["step"], {}).update(record)
  tokens, curve, step_seconds, compilations = 0.0, [], [], None
  window: list[dict] = []
  for step in sorted(by_step):
    metrics = by_step[step]
    tokens += metrics.get("rollout/generated_tokens", 0.0)
    if "time/step" in metrics:
      step_seconds.append(metrics["time/step"])
    if step > 0:
      window.append(metrics)
    compilations = metrics.get("jit/compilations", compilations)
    if "test/accuracy" in metrics:
      point = {"step": step, "sampled_tokens": tokens}
      point.update({k: metrics.get(m) for k, m in CURVE_KEYS.items()})
      point.update({k: metrics.get(m) for k, m in POINT_KEYS.items()})
      for key, metric in WINDOW_KEYS.items():
        values = [w[metric] for w in window if metric in w]
        point[key] = statistics.fmean(values) if values else None
      window = []
      curve.append(point)
  if not curve:
    raise RuntimeError(f"{path} has no test evaluation (test/accuracy); "
                       "expected configs/reproduce.py's "
                       "train.test_questions > 0.")
  final = curve[-1]
  result = {"suite": suite, "arm": name, "seed": seed,
            "test_accuracy": final["test_accuracy"],
            "start_test_accuracy": curve[0]["test_accuracy"],
            "sub_report_accuracy": final["sub_report_accuracy"],
            "sampled_tokens": tokens, "steps": max(by_step),
            "step_seconds_median": (statistics.median(step_seconds)
                                    if step_seconds else None),
            "compilations": compilations,
            **{k: final[k] for _, k in DIAGNOSTICS
               if k != "sub_report_accuracy"},
            "curve": curve}
  outcomes = read_outcomes(pathlib.Path(run_dir) / "all")
  tests = {step: split["test"] for step, split in outcomes.items()
           if step in {p["step"] for p in curve} and "test" in split}
  if tests:
    ids = sorted(tests[max(tests)])
    result["test_question_ids"] = ids
    result["test_outcomes"] = {str(step): "".join(
        str(int(answers.get(q, 0))) for q in ids)
        for step, answers in sorted(tests.items())}
  return result


def require_outcomes(results: Sequence[dict], source: str) -> None:
  """The question-level analysis needs every run's final test outcomes:
  a RuntimeError naming the runs without them and `source`."""
  missing = [f"{r['arm']} seed {r['seed']}" for r in results
             if not _has_final_outcomes(r)]
  if missing:
    raise RuntimeError(
        f"{source}: {len(missing)} run(s) lack per-question test outcomes "
        f"at their last step ({', '.join(missing)}); expected runs of this "
        "version of mgrpo_jax, which writes them to "
        "<run>/all/outcomes.jsonl. Rerun those runs (delete their "
        "result.json and run directory) to analyse the suite.")


def at_budget(curve: Sequence[dict], budget: float) -> float:
  """Test accuracy of the last point within `budget` sampled tokens."""
  within = [p for p in curve if p["sampled_tokens"] <= budget]
  return (within or curve[:1])[-1]["test_accuracy"]


def mean_std(values: Sequence[float | None]) -> tuple[float, float] | None:
  values = [v for v in values if v is not None]
  if not values:
    return None
  return (statistics.fmean(values),
          statistics.stdev(values) if len(values) > 1 else 0.0)


def _number(value: float, digits: int) -> str:
  text = f"{value:.{digits}f}"
  return text[1:] if float(text) == 0.0 and text.startswith("-") else text


def _cell(values: Sequence[float | None], scale: float = 100.0,
          digits: int = 1) -> str:
  stats = mean_std(values)
  if stats is None:
    return "-"
  per_seed = " / ".join("-" if v is None else _number(v * scale, digits)
                        for v in values)
  return (f"{_number(stats[0] * scale, digits)} ± "
          f"{_number(stats[1] * scale, digits)} ({per_seed})")


def _by_arm(results: Sequence[dict]) -> dict[str, list[dict]]:
  arms: dict[str, list[dict]] = {}
  for result in sorted(results, key=lambda r: r["seed"]):
    arms.setdefault(result["arm"], []).append(result)
  return arms


def budgets(results: Sequence[dict]) -> list[float]:
  smallest = min(r["sampled_tokens"] for r in results)
  return [round(smallest * f) for f in BUDGET_FRACTIONS]


def table(suite: str, results: Sequence[dict]) -> str:
  """The suite's markdown table (percentages; mean ± std (per seed))."""
  arms = _by_arm(results)
  marks = budgets(results)
  if suite == "ablations":
    head = ["run", "test acc. (final)", "sub report acc.",
            "sampled tokens", "compilations", "step s (median)"]
    rows = [[name, _cell([r["test_accuracy"] for r in runs]),
             _cell([r["sub_report_accuracy"] for r in runs]),
             _cell([r["sampled_tokens"] for r in runs], 1e-3, 0) + " k",
             _cell([r["compilations"] for r in runs], 1.0, 0),
             _cell([r["step_seconds_median"] for r in runs], 1.0, 1)]
            for name, runs in arms.items()]
  else:
    head = (["arm"]
            + [f"test acc. at {b:,} tokens" for b in marks]
            + ["test acc. final", "sampled tokens"]
            + [label for label, _ in DIAGNOSTICS])
    rows = [[name]
            + [_cell([at_budget(r["curve"], b) for r in runs])
               for b in marks]
            + [_cell([r["test_accuracy"] for r in runs]),
               _cell([r["sampled_tokens"] for r in runs], 1e-3, 0) + " k"]
            + [_cell([r.get(key) for r in runs],
                     100.0 if key != "delegations_hop2" else 1.0,
                     1 if key != "delegations_hop2" else 2)
               for _, key in DIAGNOSTICS]
            for name, runs in arms.items()]
  lines = ["| " + " | ".join(head) + " |",
           "|" + "---|" * len(head)]
  lines += ["| " + " | ".join(row) + " |" for row in rows]
  if "mgrpo" in arms and "frozen_sub" in arms:
    pairs = {r["seed"]: r["test_accuracy"] for r in arms["frozen_sub"]}
    diffs = [r["test_accuracy"] - pairs[r["seed"]] for r in arms["mgrpo"]
             if r["seed"] in pairs]
    lines.append("")
    lines.append("Paired per-seed difference mgrpo − frozen_sub, final "
                 f"test accuracy (points): {_cell(diffs)}")
  text = "\n".join(lines) + "\n"
  if suite != "ablations" and has_outcomes(results):
    text += reproduce_analysis.markdown(reproduce_analysis.analysis(results))
  return text


def has_outcomes(results: Sequence[dict]) -> bool:
  """Whether every run carries its final per-question test outcomes (runs
  of before they were saved do not: their suites get no analysis)."""
  return all(map(_has_final_outcomes, results))


def _has_final_outcomes(result: dict) -> bool:
  return str(result.get("steps")) in result.get("test_outcomes", {})


def _grid_mean_std(runs: Sequence[dict], key: str, points: int = 40):
  """Mean and std over seeds of `key`, linearly interpolated on a common
  grid of sampled tokens (up to the seeds' smallest total)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  curves = [[(p["sampled_tokens"], p[key]) for p in r["curve"]
             if p.get(key) is not None] for r in runs]
  curves = [c for c in curves if c]
  if not curves:
    return None
  end = min(c[-1][0] for c in curves)
  grid = np.linspace(0.0, end, points)
  values = np.array([np.interp(grid, [x for x, _ in c], [y for _, y in c])
                     for c in curves])
  return grid, values.mean(0), values.std(0)


def plot(path: pathlib.Path, suite: str, results: Sequence[dict]) -> None:
  """Four panels against sampled tokens: test accuracy, sub-agent report
  accuracy, sub-agent visit rate, delegations per two-hop question; mean ±
  std bands over seeds."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  panels = (("test_accuracy", "test accuracy"),
            ("sub_report_accuracy", "sub-agent report accuracy"),
            ("sub_visit_rate", "sub-agent visit rate"),
            ("delegations_hop2", "delegations per two-hop question"))
  figure, axes = pyplot.subplots(2, 2, figsize=(11, 8))
  arms = _by_arm(results)
  # One colour per arm in every panel (an arm without a figure, like
  # single_agent's sub-agent panels, leaves its colour unused).
  colours = {name: f"C{i}" for i, name in enumerate(arms)}
  for ax, (key, title) in zip(axes.flat, panels):
    for name, runs in arms.items():
      stats = _grid_mean_std(runs, key)
      if stats is None:
        continue
      grid, mean, std = stats
      ax.plot(grid / 1e3, mean, color=colours[name],
              label=f"{name} ({len(runs)} seeds)")
      ax.fill_between(grid / 1e3, mean - std, mean + std, alpha=0.2,
                      color=colours[name])
    ax.set_title(title)
    ax.set_xlabel("sampled tokens (thousands)")
    ax.grid(alpha=0.3)
  for ax in axes.flat:
    if ax.get_lines():  # A panel no arm has figures for has no legend.
      ax.legend(fontsize=7)
  figure.suptitle(f"reproduction, suite {suite}: mean ± std over seeds")
  figure.tight_layout()
  figure.savefig(path, dpi=90)
  pyplot.close(figure)


def write(out: pathlib.Path, suite: str, results: Sequence[dict]
          ) -> list[pathlib.Path]:
  """DIR/<output>.json, .md and .png of a finished suite."""
  out = pathlib.Path(out)
  stem = OUTPUTS[suite]
  if suite != "ablations":
    require_outcomes(results, f"{out}/runs")
  text = table(suite, results)
  summary = {
      "suite": suite, "cpu": cpu_model(),
      "budgets": budgets(results),
      "seconds": sum(r.get("seconds", 0.0) for r in results),
      "table": text, "runs": list(results)}
  if suite != "ablations":
    summary["analysis"] = reproduce_analysis.analysis(results)
  paths = [out / f"{stem}.md", out / f"{stem}.png", out / f"{stem}.json"]
  paths[0].write_text(text)
  plot(paths[1], suite, results)
  _write_json(paths[2], summary)  # Last: its presence means it is finished.
  return paths


def _write_json(path: pathlib.Path, summary: dict) -> None:
  """Writes `summary` to `path` through a temporary file and a rename, so
  the JSON is either absent or whole."""
  tmp = path.with_name(f".{path.name}.tmp")
  tmp.write_text(json.dumps(summary, indent=1, allow_nan=False) + "\n")
  tmp.rename(path)


def finite(value) -> bool:
  return isinstance(value, (int, float)) and math.isfinite(value)


def redraw(out: pathlib.Path) -> list[pathlib.Path]:
  """Re-writes the table (.md, and the JSON's copy of it) and the curves
  (.png) of every finished suite in `out` from its JSON's runs, which are
  left as they are (for a report whose layout changed since the run)."""
  drawn = []
  for suite, stem in OUTPUTS.items():
    path = pathlib.Path(out) / f"{stem}.json"
    if path.is_file():
      summary = json.loads(path.read_text())
      if suite != "ablations":
        require_outcomes(summary["runs"], str(path))
        summary["analysis"] = reproduce_analysis.analysis(summary["runs"])
      summary["table"] = table(suite, summary["runs"])
      path.with_suffix(".md").write_text(summary["table"])
      plot(path.with_suffix(".png"), suite, summary["runs"])
      _write_json(path, summary)
      drawn += [path.with_suffix(".md"), path.with_suffix(".png"), path]
  if not drawn:
    raise FileNotFoundError(
        f"{out}: holds no finished reproduction "
        f"({', '.join(f'{s}.json' for s in OUTPUTS.values())}); expected the "
        "--out directory of `bash launch/reproduce.sh`.")
  return drawn


if __name__ == "__main__":
  import sys  # pylint: disable=g-import-not-at-top
  if len(sys.argv) != 2:
    sys.exit("usage: python -m mgrpo_jax.reproduce_report DIR  (re-writes "
             "DIR's tables and curves from its results JSON)")
  try:
    for drawn_path in redraw(pathlib.Path(sys.argv[1])):
      print(drawn_path)
  except (FileNotFoundError, RuntimeError) as error:
    sys.exit(f"error: {error}")
