"""The pre-registered analysis of a reproduction suite (PROTOCOL.md): what
reproduce_report.py adds to a suite's table when every run carries its
per-question test outcomes.

  primary      final test accuracy, paired per seed, arm − frozen_sub, for
               every arm that shares seeds with frozen_sub: mean, 95% t
               interval, sign test over seeds, and the question-level tests
               (exact McNemar on the pooled (seed, question) pairs; a paired
               bootstrap over seeds and questions);
  change       each arm's final minus its own warm start (step 0), per
               seed: mean and 95% t interval;
  stability    each arm's across-seed std of test accuracy, averaged over
               the evaluation steps (the paper's stability claim);
  diagnostics  per arm, final values with 95% t intervals: sub-agent report
               accuracy, visit rate, delegations per one- and two-hop
               question, the run's mean share of informative groups per
               agent and training accuracy, and each agent's KL to its warm
               start.
The primary endpoint is `mgrpo − frozen_sub` (its sign test is two-sided).
The report adds test accuracy at fixed sampled-token budgets
(reproduce_report.py). Delegations per one-hop question and test accuracy
by hop count at the warm start and at the end (`by_hops`) were added after
the protocol's commit but before any result was read.

Figures are fractions in the JSON and points (x 100) in the markdown.
"""

from __future__ import annotations

import statistics
from typing import Sequence

import numpy as np

from mgrpo_jax import reproduce_stats as rs

REFERENCE = "frozen_sub"  # What every paired difference is taken against.
# Diagnostics in the analysis: (label, result or curve key, scale, digits).
DIAGNOSTICS = (
    ("sub report acc.", "sub_report_accuracy", 100.0, 1),
    ("sub visit rate", "sub_visit_rate", 100.0, 1),
    ("delegations / 1-hop q.", "delegations_hop1", 1.0, 2),
    ("delegations / 2-hop q.", "delegations_hop2", 1.0, 2),
    ("main informative groups", "main_informative_groups", 100.0, 1),
    ("sub informative groups", "sub_informative_groups", 100.0, 1),
    ("train acc.", "train_accuracy", 100.0, 1),
    ("main ref KL", "main_ref_kl", 1.0, 4),
    ("sub ref KL", "sub_ref_kl", 1.0, 4),
)
# Curve keys whose run value is the mean over the run's points (a per-step
# figure); the others are the final point's.
RUN_MEANS = ("main_informative_groups", "sub_informative_groups",
             "train_accuracy")


def _by_arm(results: Sequence[dict]) -> dict[str, dict[int, dict]]:
  arms: dict[str, dict[int, dict]] = {}
  for result in results:
    arms.setdefault(result["arm"], {})[result["seed"]] = result
  return arms


def _outcomes_SxQ(runs: Sequence[dict], ids: Sequence[str]) -> np.ndarray:
  """[seeds, questions] 0/1 final test outcomes of runs on the questions
  `ids` (in that order)."""
  for run in runs:
    if run["test_question_ids"] != ids:
      raise ValueError(f"{run['arm']} seed {run['seed']}: its test questions "
                       "differ from the others'; expected one test split.")
  return np.array([[int(b) for b in run["test_outcomes"][str(run["steps"])]]
                   for run in runs])


def run_value(run: dict, key: str) -> float | None:
  """A run's figure `key`: the final point's, or the mean over its points
  for the per-step figures of RUN_MEANS."""
  if key in RUN_MEANS:
    values = [p[key] for p in run["curve"] if p.get(key) is not None]
    return statistics.fmean(values) if values else None
  value = run["curve"][-1].get(key)
  return run.get(key) if value is None else value


def paired(arm_runs: dict[int, dict], ref_runs: dict[int, dict]) -> dict:
  """The primary endpoint's figures of one arm against the reference."""
  seeds = sorted(set(arm_runs) & set(ref_runs))
  diffs = [arm_runs[s]["test_accuracy"] - ref_runs[s]["test_accuracy"]
           for s in seeds]
  ids = ref_runs[seeds[0]]["test_question_ids"]
  arm_SxQ = _outcomes_SxQ([arm_runs[s] for s in seeds], ids)
  ref_SxQ = _outcomes_SxQ([ref_runs[s] for s in seeds], ids)
  return {"seeds": seeds, "differences": diffs, **rs.t_interval(diffs),
          "sign_test": rs.sign_test(diffs),
          "mcnemar": rs.mcnemar(arm_SxQ, ref_SxQ),
          "bootstrap": rs.paired_bootstrap(arm_SxQ, ref_SxQ)}


def by_hops(runs: Sequence[dict]) -> dict[str, dict] | None:
  """Test accuracy on the questions of each hop count, at the warm start
  (step 0) and at the end, with 95% t intervals over seeds (None when the
  runs do not carry their questions' hop counts)."""
  if not all("test_question_hops" in r for r in runs):
    return None
  out = {}
  for h in sorted({h for r in runs for h in r["test_question_hops"]}):
    figures = {}
    for when in ("start", "final"):
      values = []
      for run in runs:
        step = "0" if when == "start" else str(run["steps"])
        bits = run["test_outcomes"][step]
        picked = [int(b) for b, hops in zip(bits, run["test_question_hops"])
                  if hops == h]
        values.append(sum(picked) / len(picked))
      figures[when] = rs.t_interval(values)
    out[str(h)] = figures
  return out


def analysis(results: Sequence[dict]) -> dict:
  """The analysis of a main or clean suite (see the module docstring)."""
  arms = _by_arm(results)
  out: dict = {"reference": REFERENCE, "paired": {}, "arms": {}}
  for name, runs in arms.items():
    ordered = [runs[s] for s in sorted(runs)]
    finals = [r["test_accuracy"] for r in ordered]
    changes = [r["test_accuracy"] - r["start_test_accuracy"]
               for r in ordered]
    steps = sorted({p["step"] for r in ordered for p in r["curve"]})
    spread = []
    for step in steps:
      values = [p["test_accuracy"] for r in ordered for p in r["curve"]
                if p["step"] == step]
      if len(values) > 1:
        spread.append(statistics.stdev(values))
    diagnostics = {}
    for _, key, _, _ in DIAGNOSTICS:
      values = [v for v in (run_value(r, key) for r in ordered)
                if v is not None]
      diagnostics[key] = rs.t_interval(values) if values else None
    out["arms"][name] = {
        "seeds": sorted(runs), "final": rs.t_interval(finals),
        "by_hops": by_hops(ordered),
        "change_from_warm_start": rs.t_interval(changes),
        "stability": statistics.fmean(spread) if spread else None,
        "diagnostics": diagnostics}
    if name != REFERENCE and REFERENCE in arms and (
        set(runs) & set(arms[REFERENCE])):
      out["paired"][name] = paired(runs, arms[REFERENCE])
  return out


def _interval(stats: dict | None, scale: float = 100.0, digits: int = 1,
              signed: bool = False) -> str:
  if stats is None:
    return "-"
  fmt = (lambda v: f"{v * scale:+.{digits}f}") if signed else (
      lambda v: f"{v * scale:.{digits}f}")
  if stats.get("low") is None:
    return f"{fmt(stats['mean'])} (n = {stats['n']})"
  return (f"{fmt(stats['mean'])} [{fmt(stats['low'])}, "
          f"{fmt(stats['high'])}]")


def markdown(result: dict) -> str:
  """The analysis as markdown (points; intervals are 95%)."""
  lines = ["", f"Paired against `{result['reference']}` (final test "
           "accuracy, points; 95% intervals):", "",
           "| arm | seeds | mean difference [t interval] | sign test "
           "(+ / − / tie, p) | McNemar (arm only / ref. only, p) | "
           "bootstrap over seeds and questions |", "|---|---|---|---|---|---|"]
  for name, p in result["paired"].items():
    sign, mc, boot = p["sign_test"], p["mcnemar"], p["bootstrap"]
    lines.append(
        f"| {name} | {len(p['seeds'])} | {_interval(p, signed=True)} | "
        f"{sign['positive']} / {sign['negative']} / {sign['ties']}, "
        f"p = {sign['p']:.3f} | {mc['arm_only']} / {mc['reference_only']}, "
        f"p = {mc['p']:.3f} | {_interval(boot, signed=True)} |")
  lines += ["", "Each arm against its own warm start, and the diagnostics "
            "(final values; informative groups and train acc. are means "
            "over the run; 95% t intervals over seeds):", ""]
  head = ["arm", "final test acc.", "change from warm start",
          "stability (std over seeds)"] + [d[0] for d in DIAGNOSTICS]
  lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for name, a in result["arms"].items():
    cells = [name, _interval(a["final"]),
             _interval(a["change_from_warm_start"], signed=True),
             "-" if a["stability"] is None else f"{a['stability'] * 100:.1f}"]
    cells += [_interval(a["diagnostics"][key], scale, digits)
              for _, key, scale, digits in DIAGNOSTICS]
    lines.append("| " + " | ".join(cells) + " |")
  hop_rows = [(name, a["by_hops"]) for name, a in result["arms"].items()
              if a.get("by_hops")]
  if hop_rows:
    hops = sorted({h for _, b in hop_rows for h in b}, key=int)
    lines += ["", "Test accuracy by the questions' hop count, warm start -> "
              "final (95% t intervals over seeds):", "",
              "| arm | " + " | ".join(f"{h}-hop" for h in hops) + " |",
              "|---|" + "---|" * len(hops)]
    for name, b in hop_rows:
      lines.append(f"| {name} | " + " | ".join(
          f"{_interval(b[h]['start'])} -> {_interval(b[h]['final'])}"
          if h in b else "-" for h in hops) + " |")
  return "\n".join(lines) + "\n"
