"""The pilot that chose the reproduction's task, on the validation split only.

  bash launch/reproduce.sh --pilot [--out DIR] [--settings A,B] [--steps N]
  python -m mgrpo_jax.reproduce_pilot ...   (the same, without the set-up)

--steps N (at least 5) makes screening runs of N steps, in run directories
of their own (the warm start's figures need only the first steps).

Each setting is one `mgrpo` run of seed 0 on `configs/reproduce.py:pilot`
(the reproduction's task with no test evaluation: the test split is never
looked at) with a few fields changed (SETTINGS): the two agents' weaknesses
in the warm start, the learning rate, B x K at equal rollouts per step.
From each run's metrics and per-question validation outcomes the pilot
reports what the choice rests on (PILOT_FIGURES):

  train_accuracy   share of the training rollouts answered right over the
                   first 5 steps (the warm start's; the target is 0.3-0.6,
                   so that most question groups carry a signal);
  informative      main/informative_groups over the same steps;
  validation       greedy validation accuracy at step 0 and at the end;
  change, noise    the end minus step 0, and the standard error of that
                   paired difference over the validation questions
                   (sqrt(discordant) / n): the policies moved if
                   |change| > 2 x noise;
  visit_rate, delegations_hop2, report_accuracy
                   the weaknesses at step 0 and at the end (the sub-agent's
                   visit rate and report accuracy below 1, the planner's
                   delegations per two-hop question below 2: both agents
                   keep something to learn);
  main_ref_kl_end, sub_ref_kl_end
                   each agent's KL to its warm start at the end.

DIR/pilot.json holds them per setting, DIR/pilot.md the table. Runs are
resumable like the reproduction's (a finished run is kept, a killed one
resumes from its checkpoint).
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import statistics
import sys
from typing import Sequence

from mgrpo_jax import reproduce
from mgrpo_jax import reproduce_stats
from mgrpo_jax.runtime.config_checks import usage_error
from mgrpo_jax.runtime.metrics import JSONL_NAME, read_jsonl
from mgrpo_jax.train.outcomes import read_outcomes

CONFIG = f"{reproduce.CONFIG}:pilot"
# Setting -> overrides on configs/reproduce.py:pilot (seed 0, mgrpo arm).
WEAKNESSES = {  # Planner's early answers, sub-agent's lazy reports.
    "weak": {"sft.early_answer": 0.5, "sft.lazy_report": 0.4},
    "mild": {"sft.early_answer": 0.3, "sft.lazy_report": 0.2},
    "light": {"sft.early_answer": 0.15, "sft.lazy_report": 0.1},
    # The planner's weakness of configs/default.py (which M-GRPO fixes in
    # its 25 steps), the sub-agent's light.
    "eager": {"sft.early_answer": 0.6, "sft.lazy_report": 0.1},
}


def _lr(rate: float) -> dict[str, float]:
  return {"learner.main.learning_rate": rate,
          "learner.sub.learning_rate": rate}


B16K4 = {"train.questions_per_step": 16, "train.group_size": 4}
SETTINGS: dict[str, dict[str, object]] = {
    "mild_lr1e-3": {**WEAKNESSES["mild"], **_lr(1e-3)},
    "mild_lr3e-4": {**WEAKNESSES["mild"], **_lr(3e-4)},
    "light_lr3e-4": {**WEAKNESSES["light"], **_lr(3e-4)},
    "light_lr3e-4_b16k4": {**WEAKNESSES["light"], **_lr(3e-4), **B16K4},
    "light_lr1e-4": {**WEAKNESSES["light"], **_lr(1e-4)},
    "weak_lr3e-4": {**WEAKNESSES["weak"], **_lr(3e-4)},
    "eager_lr3e-4": {**WEAKNESSES["eager"], **_lr(3e-4)},
    "eager_lr1e-3": {**WEAKNESSES["eager"], **_lr(1e-3)},
    "eager_lr3e-4_b16k4": {**WEAKNESSES["eager"], **_lr(3e-4), **B16K4},
}
FIRST_STEPS = 5  # Steps whose training rollouts measure the warm start.
PILOT_FIGURES = ("train_accuracy", "informative", "validation_start",
                 "validation_end", "change", "noise", "moved",
                 "visit_rate_start", "visit_rate_end",
                 "delegations_hop2_start", "delegations_hop2_end",
                 "report_accuracy_start", "report_accuracy_end",
                 "sub_informative", "main_ref_kl_end", "sub_ref_kl_end")


def paired_noise(start: dict[str, int], end: dict[str, int]) -> float:
  """Standard error of the paired difference of two evaluations of the same
  questions (task id -> 1 / 0): sqrt(b + c) / n, b and c the questions that
  went right -> wrong and wrong -> right (McNemar's)."""
  common = sorted(set(start) & set(end))
  if not common:
    raise ValueError("paired_noise: the two evaluations share no question.")
  test = reproduce_stats.mcnemar([[end[q] for q in common]],
                                 [[start[q] for q in common]])
  return math.sqrt(test["arm_only"] + test["reference_only"]) / test["pairs"]


def summarise(run_dir: pathlib.Path) -> dict[str, float | bool]:
  """The pilot's figures of one finished run (see the module docstring)."""
  records, _ = read_jsonl(run_dir / "all" / JSONL_NAME)
  by_step: dict[int, dict] = {}
  for record in records:
    by_step.setdefault(record["step"], {}).update(record)
  last = max(by_step)
  first = [by_step[s] for s in range(1, FIRST_STEPS + 1) if s in by_step]
  outcomes = read_outcomes(run_dir / "all")
  if 0 not in outcomes or last not in outcomes:
    raise RuntimeError(f"{run_dir}/all/outcomes.jsonl lacks the validation "
                       f"outcomes of step 0 or {last}.")
  start, end = outcomes[0]["validation"], outcomes[last]["validation"]
  change = (statistics.fmean(end.values())
            - statistics.fmean(start.values()))
  noise = paired_noise(start, end)

  def mean(key, rows):
    values = [r[key] for r in rows if key in r]
    return statistics.fmean(values) if values else None

  return {
      "train_accuracy": mean("main/accuracy", first),
      "informative": mean("main/informative_groups", first),
      "sub_informative": mean("sub/informative_groups", first),
      "validation_start": by_step[0]["eval/accuracy"],
      "validation_end": by_step[last]["eval/accuracy"],
      "change": change, "noise": noise, "moved": abs(change) > 2 * noise,
      "visit_rate_start": by_step[0].get("eval/sub_visit_rate"),
      "visit_rate_end": by_step[last].get("eval/sub_visit_rate"),
      "delegations_hop2_start": by_step[0].get("eval/main_delegations_hop2"),
      "delegations_hop2_end": by_step[last].get("eval/main_delegations_hop2"),
      "report_accuracy_start": by_step[0].get("eval/sub_report_accuracy"),
      "report_accuracy_end": by_step[last].get("eval/sub_report_accuracy"),
      "main_ref_kl_end": by_step[last].get("main/ref_kl"),
      "sub_ref_kl_end": by_step[last].get("sub/ref_kl"),
      "steps": last,
  }


def table(figures: dict[str, dict]) -> str:
  head = ["setting", *PILOT_FIGURES]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for name, f in figures.items():
    cells = [name] + [("-" if f.get(k) is None else str(f[k])
                       if isinstance(f[k], bool) else f"{f[k]:.3f}")
                      for k in PILOT_FIGURES]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      prog="python -m mgrpo_jax.reproduce_pilot",
      description="The task pilot of the reproduction (validation only).")
  parser.add_argument("--out", default="runs/reproduce_pilot",
                      help="output directory (default runs/reproduce_pilot)")
  parser.add_argument("--settings", default=",".join(SETTINGS),
                      help=f"comma-separated, of {', '.join(SETTINGS)}")
  parser.add_argument("--steps", type=int, default=None,
                      help="steps per run (default: the config's)")
  args = parser.parse_args(argv)
  args.setting_list = reproduce.comma_list("--settings", args.settings,
                                           list(SETTINGS))
  if args.steps is not None and args.steps < FIRST_STEPS:
    usage_error(f"--steps={args.steps}: expected an integer >= "
                f"{FIRST_STEPS} (the first {FIRST_STEPS} steps measure the "
                "warm start).")
  return args


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  out = pathlib.Path(args.out).resolve()
  log = lambda message: print(f"[pilot] {message}", flush=True)
  path = out / "pilot.json"
  figures = json.loads(path.read_text()) if path.is_file() else {}
  for name in args.setting_list:
    overrides = {**reproduce.ARMS["mgrpo"], **SETTINGS[name]}
    label = name
    if args.steps is not None:  # A screening run of its own.
      overrides["train.steps"] = args.steps
      label = f"{name}-{args.steps}steps"
    run = reproduce.Run("pilot", label, 0, CONFIG, tuple(overrides.items()))
    run_dir = reproduce.run_once(run, out, log)
    figures[label] = {"overrides": overrides, **summarise(run_dir)}
    log(f"{label}: " + ", ".join(
        f"{k} {v:.3f}" for k, v in figures[label].items()
        if isinstance(v, float)))
    path.write_text(json.dumps(figures, indent=1) + "\n")
    (out / "pilot.md").write_text(table(figures))
  log(f"wrote {path} and {out / 'pilot.md'}")
  return 0


if __name__ == "__main__":
  reproduce.cli(main, "reproduce_pilot")
