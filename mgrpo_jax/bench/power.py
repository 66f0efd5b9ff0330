"""How long would a powered comparison take? Seeds, steps and hours.

  python -m mgrpo_jax.bench.power [--controls launch/results/controls]
      [--reference launch/results/reproduce/results.json]
      [--steps 40] [--test-questions 100] [--effects 0.05,0.10]
      [--out launch/results/controls]

The comparison (mgrpo - frozen_sub on test accuracy, paired by seed) needs
n seeds to detect an effect d with 80% power at a two-sided 5% level:
n = ((t(0.975, n-1) + t(0.80, n-1)) * sigma / d)^2, solved for the
smallest n. sigma, the seed-to-seed standard deviation of the paired
difference, is the one measured by the first suite (its 8 seeds, 200 test
questions each), scaled by sqrt(200 / test questions): at fewer questions
a seed's accuracy is noisier (the binomial part dominates it there).

A run's hours come from the positive controls measured on this testbed
(bench/controls.py's controls.json): an M-GRPO team step is taken as the
sub-agent control's step plus the planner control's (each runs one
learner's sampling and update beside a scripted partner that costs almost
nothing), an evaluation (greedy) as the two controls' evaluations per
rollout scaled to the test questions, and each seed's warm start as
the controls' SFT (shared by the seed's two arms). Writes OUT/power.json
and OUT/power.md.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import statistics
import sys

from scipy import stats

from mgrpo_jax.bench.common import command_line, write_output

REFERENCE_QUESTIONS = 200  # Test questions per seed of the first suite.


def seeds_needed(sigma: float, effect: float, power: float = 0.8,
                 alpha: float = 0.05, most: int = 10_000) -> int:
  """Smallest n >= 2 whose paired t-test detects `effect` with `power`."""
  if sigma <= 0 or effect <= 0:
    raise ValueError(f"seeds_needed: sigma={sigma}, effect={effect}; "
                     "expected both > 0.")
  for n in range(2, most + 1):
    df = n - 1
    needed = ((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df))
              * sigma / effect) ** 2
    if n >= needed:
      return n
  return most


def seed_sigma(reference: dict, test_questions: int) -> float:
  """The first suite's seed SD of mgrpo - frozen_sub, scaled to
  `test_questions` per seed."""
  differences = reference["analysis"]["paired"]["mgrpo"]["differences"]
  return statistics.stdev(differences) * math.sqrt(
      REFERENCE_QUESTIONS / test_questions)


def run_costs(controls: dict, eval_questions: int) -> dict[str, float]:
  """Seconds of a team step, of one evaluation of `eval_questions` and of
  a warm start, from the controls' measured figures."""
  results = controls["results"]
  missing = [w for w in ("sub", "main") if w not in results]
  if missing:
    raise ValueError(f"controls.json has no {' or '.join(missing)} control; "
                     "run python -m mgrpo_jax.bench.controls first.")
  step = sum(results[w]["median time/step"] for w in ("sub", "main"))
  # A control's evaluation ran a greedy rollout and `samples` sampled ones
  # per question; the comparison's test evaluation runs the greedy one.
  evaluation = sum(results[w]["mean time/eval"] * eval_questions
                   / (results[w]["questions"]
                      * (1 + ((results[w].get("sampled") or {})
                              .get("samples", 0))))
                   for w in ("sub", "main"))
  return {"step": step, "evaluation": evaluation,
          "warm_start": results["sub"]["sft_seconds"]}


def plan_hours(costs: dict[str, float], seeds: int, steps: int,
               evaluations: int = 2) -> float:
  """Wall hours of `seeds` x two arms of `steps` steps each."""
  arm = steps * costs["step"] + evaluations * costs["evaluation"]
  return seeds * (costs["warm_start"] + 2 * arm) / 3600


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m mgrpo_jax.bench.power",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--controls", default="launch/results/controls")
  parser.add_argument("--reference",
                      default="launch/results/reproduce/results.json")
  parser.add_argument("--steps", type=int, default=40)
  parser.add_argument("--test-questions", type=int, default=100)
  parser.add_argument("--effects", default="0.05,0.10")
  parser.add_argument("--out", default="launch/results/controls")
  args = parser.parse_args(sys.argv[1:] if argv is None else argv)
  try:
    effects = [float(e) for e in args.effects.split(",")]
  except ValueError:
    parser.error(f"--effects {args.effects!r}: expected comma-separated "
                 "fractions, e.g. 0.05,0.10")
  if not all(0 < e < 1 for e in effects):
    parser.error(f"--effects {args.effects!r}: expected fractions in (0, 1)")
  if args.steps < 1 or args.test_questions < 1:
    parser.error(f"--steps {args.steps} --test-questions "
                 f"{args.test_questions}: expected both >= 1")
  controls_path = pathlib.Path(args.controls) / "controls.json"
  if not controls_path.is_file():
    parser.error(f"--controls {args.controls}: no controls.json there; run "
                 "python -m mgrpo_jax.bench.controls first")
  controls = json.loads(controls_path.read_text())
  reference = json.loads(pathlib.Path(args.reference).read_text())
  sigma = seed_sigma(reference, args.test_questions)
  costs = run_costs(controls, args.test_questions)
  rows = []
  for effect in effects:
    seeds = seeds_needed(sigma, effect)
    rows.append({"effect": effect, "seeds": seeds,
                 "hours": plan_hours(costs, seeds, args.steps)})
  summary = {"machine": controls["machine"], "sigma": sigma,
             "steps": args.steps, "test_questions": args.test_questions,
             "costs_seconds": costs, "rows": rows,
             "hours_8_seeds": plan_hours(costs, 8, args.steps)}
  write_output(str(pathlib.Path(args.out) / "power.json"), summary)
  lines = [
      "# Power of the comparison on SmolLM2-135M (estimate)", "",
      f"From the controls measured on {controls['machine']} and the first "
      f"suite's seed noise; `{command_line('power', argv)}`", "",
      f"Seed SD of mgrpo - frozen_sub at {args.test_questions} test "
      f"questions: {100 * sigma:.1f} points. A team step "
      f"{costs['step']:.0f} s, an evaluation of {args.test_questions} test "
      f"questions {costs['evaluation']:.0f} s, a warm start "
      f"{costs['warm_start']:.0f} s; {args.steps} steps per run, two "
      "evaluations per run, two arms per seed.", "",
      "| effect to detect (80% power, 5% two-sided) | seeds | hours |",
      "|---|---|---|"]
  lines += [f"| {100 * r['effect']:.0f} points | {r['seeds']} | "
            f"{r['hours']:.1f} |" for r in rows]
  lines += ["", f"8 seeds (the issue's minimum): "
            f"{summary['hours_8_seeds']:.1f} hours."]
  write_output(str(pathlib.Path(args.out) / "power.md"),
               "\n".join(lines) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
