"""The paper's comparison, reproduced from one command.

  bash launch/reproduce.sh [--quick] [--out DIR] [--suite SUITES]
                           [--arms ARMS] [--seeds N]
  python -m mgrpo_jax.reproduce ...   (the same, without the set-up)

Suites (comma-separated; default "main"):
  main       the arms on the task of configs/reproduce.py (both agents
             warm-started with a documented weakness; about 75 minutes on a
             2-core CPU with no warm start cached);
  clean      the same arms on the variant with no injected weakness (as
             long again: three more warm starts);
  ablations  the mgrpo arm with one setting changed (ABLATIONS), against
             the main suite's mgrpo runs of the same seeds.

Arms (ARMS): single_agent (one agent searches, visits and answers),
frozen_sub (only the planner trains), mgrpo (both train, the sub-agent's
reward tied to the main outcome) and mgrpo_no_credit (both train, v_main = 0:
the sub-agent's reward without the main outcome). Seed s of every arm starts
from the same warm start (the warm-start cache is keyed by the seed and the
settings; single_agent's has the single agent's demonstrations), so arms are
paired by seed.

Each run is `python -m mgrpo_jax.main` in its own process, in DIR/runs/NAME
(log in DIR/runs/NAME.log); its figures go to DIR/runs/NAME/result.json
when it ends. A killed reproduction is resumed by the same command: finished
runs are kept, an unfinished one resumes from its last checkpoint. When every
run of a suite is done, reproduce_report.py writes DIR/results.json (main,
clean) or DIR/ablations.json, the tables (.md) and the curves (.png). A DIR
that holds them is refused: a finished reproduction is never overwritten.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Sequence

from mgrpo_jax import reproduce_report
from mgrpo_jax.runtime.config_checks import usage_error

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "reproduce.py"
# Overrides on configs/reproduce.py that make each arm.
ARMS: dict[str, dict[str, object]] = {
    "single_agent": {"mode": "single",
                     # Search and visit per hop, then answer (2 hops).
                     "agents.main.max_turns": 5},
    "frozen_sub": {"mode": "frozen_sub"},
    "mgrpo": {"mode": "mgrpo"},
    "mgrpo_no_credit": {"mode": "mgrpo", "reward.v_main": 0.0},
}
# Overrides on the mgrpo arm; the reference (D_max 2, aligned, group
# scale, sync with token correction) is the main suite's mgrpo run.
ABLATIONS: dict[str, dict[str, object]] = {
    "d_max_1": {"align.d_max": 1},
    "d_max_4": {"align.d_max": 4},
    "align_off": {"align.d_max": 0},
    "scale_batch": {"advantage.scale": "batch"},
    "scale_none": {"advantage.scale": "none"},
    "one_step_none": {"train.staleness": "one_step",
                      "learner.main.off_policy": "none",
                      "learner.sub.off_policy": "none"},
    "one_step_token": {"train.staleness": "one_step"},
}
SUITES = ("main", "clean", "ablations")
DEFAULT_SEEDS = {"main": 3, "clean": 3, "ablations": 2}
QUICK_SEEDS = 2


@dataclasses.dataclass(frozen=True)
class Run:
  """One training run of the reproduction."""
  suite: str
  name: str  # Arm or ablation.
  seed: int
  config: str  # --config value.
  overrides: tuple[tuple[str, object], ...]

  @property
  def directory_name(self) -> str:
    prefix = "" if self.suite == "main" else f"{self.suite}-"
    return f"{prefix}{self.name}-seed{self.seed}"


def plan(suite: str, arms: Sequence[str], seeds: int, quick: bool
         ) -> list[Run]:
  """The runs of one suite, seed-major (a seed's warm start is built once,
  by its first run, and reused by the others)."""
  size = "quick" if quick else "full"
  runs = []
  for seed in range(seeds):
    if suite == "ablations":
      for name, overrides in ABLATIONS.items():
        runs.append(Run(suite, name, seed, f"{CONFIG}:{size}", tuple(
            {**ARMS["mgrpo"], **overrides}.items())))
    else:
      config = f"{CONFIG}:{size}" + (":clean" if suite == "clean" else "")
      for arm in arms:
        runs.append(Run(suite, arm, seed, config, tuple(ARMS[arm].items())))
  return runs


def command(run: Run, run_dir: pathlib.Path) -> list[str]:
  flags = [f"--config={run.config}", f"--config.seed={run.seed}",
           f"--config.run_dir={run_dir}"]
  flags += [f"--config.{k}={v}" for k, v in run.overrides]
  return [sys.executable, "-m", "mgrpo_jax.main", *flags]


def execute(run: Run, out: pathlib.Path, log) -> dict:
  """Runs (or resumes) one run; returns its result (cached in result.json)."""
  run_dir = out / "runs" / run.directory_name
  result_file = run_dir / "result.json"
  if result_file.is_file():
    return json.loads(result_file.read_text())
  run_dir.mkdir(parents=True, exist_ok=True)
  log_file = out / "runs" / f"{run.directory_name}.log"
  log(f"{run.directory_name}: running (log: {log_file})")
  start = time.perf_counter()
  with open(log_file, "a") as stream:
    code = subprocess.call(command(run, run_dir), stdout=stream,
                           stderr=subprocess.STDOUT, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
  if code != 0:
    tail = "".join(log_file.read_text().splitlines(True)[-15:])
    raise RuntimeError(f"{run.directory_name} failed (exit {code}); the end "
                       f"of {log_file}:\n{tail}\nRun the same command again "
                       "to resume once the cause is fixed.")
  result = reproduce_report.run_result(run_dir, suite=run.suite,
                                       name=run.name, seed=run.seed)
  result["seconds"] = time.perf_counter() - start
  result_file.write_text(json.dumps(result, indent=1) + "\n")
  log(f"{run.directory_name}: test accuracy {result['test_accuracy']:.3f} "
      f"after {result['sampled_tokens']:.0f} sampled tokens "
      f"({result['seconds']:.0f} s)")
  return result


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      prog="bash launch/reproduce.sh",
      description="Reproduces the M-GRPO comparison (see README).")
  parser.add_argument("--quick", action="store_true",
                      help="tiny sizes, 2 seeds: checks the plumbing in "
                      "minutes")
  parser.add_argument("--out", default=None,
                      help="output directory (default runs/reproduce, or "
                      "runs/reproduce_quick with --quick)")
  parser.add_argument("--suite", default=None,
                      help=f"comma-separated, of {', '.join(SUITES)} "
                      "(default main)")
  parser.add_argument("--arms", default=",".join(ARMS),
                      help=f"comma-separated, of {', '.join(ARMS)}")
  parser.add_argument("--seeds", type=int, default=None,
                      help="seeds per arm (default: 3; 2 for ablations "
                      "and with --quick)")
  args = parser.parse_args(argv)
  if args.suite is None:
    args.suite = "main"
  args.suites = [s for s in args.suite.split(",") if s]
  args.arm_list = [a for a in args.arms.split(",") if a]
  for what, given, known in (("--suite", args.suites, SUITES),
                             ("--arms", args.arm_list, ARMS)):
    unknown = [x for x in given if x not in known]
    if unknown or not given:
      usage_error(f"{what}={getattr(args, what[2:])!r}: "
                  f"{'unknown ' + ', '.join(map(repr, unknown)) if unknown else 'empty'}; "
                  f"expected a comma-separated list of {', '.join(known)}.")
  if args.seeds is not None and args.seeds < 1:
    usage_error(f"--seeds={args.seeds}: expected an integer >= 1 (seeds "
                "per arm).")
  if args.out is None:
    args.out = "runs/reproduce_quick" if args.quick else "runs/reproduce"
  return args


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  out = pathlib.Path(args.out).resolve()
  finished = [reproduce_report.output_of(s) for s in args.suites
              if (out / reproduce_report.output_of(s)).exists()]
  if finished:
    usage_error(f"--out={args.out}: holds a finished reproduction "
                f"({', '.join(sorted(set(finished)))}); it is never "
                "overwritten: choose another --out, or move it away.")
  log = lambda message: print(f"[reproduce] {message}", flush=True)
  start = time.perf_counter()
  for suite in args.suites:
    seeds = args.seeds or (QUICK_SEEDS if args.quick
                           else DEFAULT_SEEDS[suite])
    runs = plan(suite, args.arm_list, seeds, args.quick)
    log(f"suite {suite}: {len(runs)} runs")
    results = [execute(run, out, log) for run in runs]
    if suite == "ablations":
      references = [execute(run, out, log) for run in plan(
          "main", ["mgrpo"], seeds, args.quick)]
      results = references + results
    written = reproduce_report.write(out, suite, results)
    log(f"suite {suite}: wrote {', '.join(map(str, written))}")
  log(f"done in {time.perf_counter() - start:.0f} s")
  return 0


if __name__ == "__main__":
  try:
    sys.exit(main())
  except RuntimeError as e:
    print(f"reproduce: {e}", file=sys.stderr)
    sys.exit(1)
