"""The positive controls: can each learner learn on the reading testbed?

  python -m mgrpo_jax.bench.controls [--which sub,main]
      [--out launch/results/controls] [--config configs/controls.py]
      [--seed 0] [--quick] [--set train.steps=30 --set ...]

Each control (configs/controls.py: `sub`, the sub-agent alone over a
scripted planner with a direct report reward; `main`, the planner alone over
a scripted reader) is one `python -m mgrpo_jax.main` run in its own process
(resumable: the same command resumes a killed run from its checkpoint, a
finished one is kept). From its metrics and per-question validation
outcomes it reports, at each evaluation: the team's validation accuracy
(over a scripted partner, the learner's own accuracy), the sub-agent's
report and read accuracy and visit rate, the planner's delegations and
early answers; then the change from step 0 to the last evaluation and its
noise, the standard error of that paired difference over the validation
questions (sqrt(discordant) / n, the pilot's definition). With
train.eval_samples > 0 the primary measure is the sampled accuracy (each
question's share of right sampled rollouts at the training temperature:
what GRPO climbs; its noise the standard error of the per-question paired
differences), the greedy one reported beside it. A control passes when the
primary change exceeds twice its noise. OUT/controls.json and
OUT/controls.md hold the table, the CPU model and each run's seconds.
`--quick` runs the controls at tiny sizes (configs/controls.py's
`:quick`): the plumbing, not a result.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import statistics
import sys

from mgrpo_jax import reproduce
from mgrpo_jax.bench.common import command_line, machine, write_output
from mgrpo_jax.reproduce_pilot import paired_noise
from mgrpo_jax.runtime.metrics import JSONL_NAME, read_jsonl
from mgrpo_jax.train.outcomes import read_outcomes

WHICH = ("sub", "main")
# What each evaluation reports (eval/<name>), in the table's order.
FIGURES = ("accuracy", "sampled_accuracy", "sub_report_accuracy",
           "sub_read_accuracy", "sub_visit_rate", "main_delegations_hop2", "main_early_answer",
           "sampled_sub_report_accuracy", "sampled_sub_visit_rate",
           "sampled_main_early_answer")
# Training-time figures averaged over the run's steps.
STEP_FIGURES = ("time/step", "main/informative_groups",
                "sub/informative_groups", "main/ref_kl", "sub/ref_kl")


def by_step(run_dir: pathlib.Path) -> dict[int, dict]:
  """step -> the merged metrics records of that step."""
  records, _ = read_jsonl(run_dir / "all" / JSONL_NAME)
  out: dict[int, dict] = {}
  for record in records:
    out.setdefault(record["step"], {}).update(record)
  return out


def sampled_change(start: dict[str, list[int]], end: dict[str, list[int]]
                   ) -> tuple[float, float, int]:
  """(change, noise, questions) of sampled accuracy between two
  evaluations (task id -> 1 / 0 per sampled rollout): the mean over the
  questions both hold of each question's share right, end minus start, and
  the standard error of that paired difference over the questions."""
  common = sorted(set(start) & set(end))
  if len(common) < 2:
    raise ValueError(f"sampled_change: the two evaluations share "
                     f"{len(common)} questions; expected at least 2.")
  diffs = [statistics.fmean(end[q]) - statistics.fmean(start[q])
           for q in common]
  return (statistics.fmean(diffs),
          statistics.stdev(diffs) / math.sqrt(len(diffs)), len(common))


def summarise(run_dir: pathlib.Path) -> dict:
  """A finished control's figures (see the module docstring)."""
  steps = by_step(run_dir)
  outcomes = read_outcomes(run_dir / "all")
  evaluated = sorted(s for s in outcomes if "validation" in outcomes[s])
  if len(evaluated) < 2 or evaluated[0] != 0:
    raise RuntimeError(f"{run_dir}/all/outcomes.jsonl holds validation "
                       f"outcomes of steps {evaluated}; a control needs "
                       "step 0 and a later one.")
  first, last = evaluated[0], evaluated[-1]
  start = outcomes[first]["validation"]
  end = outcomes[last]["validation"]
  change = statistics.fmean(end.values()) - statistics.fmean(start.values())
  noise = paired_noise(start, end)
  figures = {"measure": "greedy", "change": change, "noise": noise,
             "questions": len(set(start) & set(end))}
  greedy = dict(figures)
  sampled = None
  if all("validation_sampled" in outcomes[s] for s in (first, last)):
    s_change, s_noise, s_questions = sampled_change(
        outcomes[first]["validation_sampled"],
        outcomes[last]["validation_sampled"])
    sampled = {"measure": "sampled", "change": s_change, "noise": s_noise,
               "questions": s_questions, "samples": len(next(iter(
                   outcomes[last]["validation_sampled"].values())))}
    figures = dict(sampled)  # What GRPO climbs: the primary measure.
  trained = [steps[s] for s in steps if s > 0]
  eval_seconds = [steps[s]["time/eval"] for s in evaluated
                  if "time/eval" in steps.get(s, {})]

  def mean(key):
    values = [r[key] for r in trained if key in r]
    return statistics.fmean(values) if values else None

  return {
      "evaluations": {str(s): {f: steps.get(s, {}).get(f"eval/{f}")
                               for f in FIGURES} for s in evaluated},
      **figures, "passed": figures["change"] > 2 * figures["noise"],
      "greedy": greedy, "sampled": sampled,
      "steps": last,
      "sft_seconds": steps.get(0, {}).get("time/sft"),
      "mean time/eval": (statistics.fmean(eval_seconds) if eval_seconds
                         else None),
      **{f"mean {k}": mean(k) for k in STEP_FIGURES},
      # The step that ends with an evaluation counts it in its time/step.
      "median time/step": (statistics.median(
          [r["time/step"] for r in trained if "time/step" in r])
          if any("time/step" in r for r in trained) else None),
  }


def table(results: dict[str, dict]) -> str:
  pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"
  num = lambda v: "-" if v is None else f"{v:.2f}"
  lines = ["| control | step | validation accuracy (greedy) | sampled | "
           "sub report accuracy | sub read accuracy | sub visit rate | "
           "delegations per two-hop question | early answers | sampled: "
           "sub report accuracy | sampled: sub visit rate | sampled: early "
           "answers |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for name, r in results.items():
    for step, e in r["evaluations"].items():
      lines.append(
          f"| {name} | {step} | {pct(e['accuracy'])} | "
          f"{pct(e.get('sampled_accuracy'))} | "
          f"{pct(e['sub_report_accuracy'])} | {pct(e['sub_read_accuracy'])} "
          f"| {pct(e['sub_visit_rate'])} | "
          f"{num(e['main_delegations_hop2'])} | "
          f"{pct(e['main_early_answer'])} | "
          f"{pct(e.get('sampled_sub_report_accuracy'))} | "
          f"{pct(e.get('sampled_sub_visit_rate'))} | "
          f"{pct(e.get('sampled_main_early_answer'))} |")
  lines += ["", "| control | measure | change | noise (paired SE) | passed "
            "(change > 2 x noise) | questions | s per step (median) | SFT s |",
            "|---|---|---|---|---|---|---|---|"]
  for name, r in results.items():
    for which in ("sampled", "greedy"):
      m = r.get(which)
      if not m:
        continue
      primary = m["measure"] == r["measure"]
      lines.append(
          f"| {name} | {m['measure']}{' (primary)' if primary else ''} | "
          f"{100 * m['change']:+.1f} points | {100 * m['noise']:.1f} points "
          f"| {('yes' if m['change'] > 2 * m['noise'] else 'no')} | "
          f"{m['questions']} | {num(r.get('median time/step'))} | "
          f"{num(r.get('sft_seconds'))} |")
  return "\n".join(lines) + "\n"


def parse_args(argv) -> argparse.Namespace:
  parser = argparse.ArgumentParser(prog="python -m mgrpo_jax.bench.controls",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--which", default=",".join(WHICH),
                      help=f"comma-separated, of {', '.join(WHICH)}")
  parser.add_argument("--out", default="launch/results/controls")
  parser.add_argument("--config", default="configs/controls.py")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--quick", action="store_true",
                      help="tiny sizes: the plumbing, not a result")
  parser.add_argument("--set", action="append", default=[],
                      help="KEY=VALUE: a config field of every control")
  args = parser.parse_args(argv)
  args.which_list = reproduce.comma_list("--which", args.which, list(WHICH))
  for override in args.set:
    if "=" not in override or not override.partition("=")[0]:
      parser.error(f"--set {override!r}: expected KEY=VALUE, e.g. "
                   "train.steps=30")
  return args


def main(argv=None) -> int:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  out = pathlib.Path(args.out).resolve()
  log = lambda message: print(f"[controls] {message}", flush=True)
  path = out / "controls.json"
  saved = json.loads(path.read_text()) if path.is_file() else {}
  results = saved.get("results", {})
  overrides = tuple(tuple(o.split("=", 1)) for o in args.set)
  for name in args.which_list:
    run = reproduce.Run("controls", name, args.seed,
                        f"{args.config}:{name}"
                        + (":quick" if args.quick else ""), overrides)
    run_dir = reproduce.run_once(run, out, log)
    results[name] = {"overrides": dict(overrides), **summarise(run_dir)}
    log(f"{name}: change {100 * results[name]['change']:+.1f} points, "
        f"noise {100 * results[name]['noise']:.1f}, passed "
        f"{results[name]['passed']}")
    summary = {"machine": machine(), "config": args.config,
               "seed": args.seed, "results": results}
    write_output(str(path), summary)
    write_output(str(out / "controls.md"), (
        f"# Positive controls ({args.config}, seed {args.seed}, "
        "validation)\n\n"
        f"{machine()}; `{command_line('controls', argv)}`\n\n"
        + table(results)))
  log(f"wrote {path} and {out / 'controls.md'}")
  return 0


if __name__ == "__main__":
  reproduce.cli(main, "bench.controls")
