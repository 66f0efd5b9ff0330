"""The paper's comparison, reproduced from one command.

  bash launch/reproduce.sh [--quick] [--out DIR] [--suite SUITES]
                           [--arms ARMS] [--seeds N] [--protocol FILE|none]
  python -m mgrpo_jax.reproduce ...   (the same, without the set-up)

Suites (comma-separated; default "main"):
  main       the pre-registered comparison on the task of
             configs/reproduce.py (launch/results/reproduce/PROTOCOL.md):
             the primary pair frozen_sub / mgrpo on 8 seeds, the other arms
             on 4 (MAIN_SEEDS); checked against the protocol before any
             run, its time left printed before it starts (COST);
  clean      the same arms on the variant with no injected weakness;
  ablations  the mgrpo arm with one setting changed (ABLATIONS), against
             the main suite's mgrpo runs of the same seeds.

Arms (ARMS): frozen_sub (only the planner trains), mgrpo (both train, the
sub-agent's reward tied to the main outcome), mgrpo_no_credit (both train,
v_main = 0: the sub-agent's reward without the main outcome), mgrpo_expert
(the paper's composite sub-agent reward: the main outcome's credit and the
rule expert's score of the sub-agent's own report) and single_agent (one
agent searches, visits and answers, with the team's turn slack and about
its sampled tokens per step). Seed s of every arm starts from the same warm
start (the warm-start cache is keyed by the seed and the settings;
single_agent's has the single agent's demonstrations), so arms are paired
by seed; seeds are always 0 .. n-1.

Each run is `python -m mgrpo_jax.main` in its own process, in DIR/runs/NAME
(log in DIR/runs/NAME.log); its figures go to DIR/runs/NAME/result.json
when it ends. A killed reproduction is resumed by the same command: finished
runs are kept, an unfinished one resumes from its last checkpoint, so a
suite can be run in several sittings. When every run of a suite is done,
reproduce_report.py writes DIR/results.json (main, clean) or
DIR/ablations.json, the tables (.md, with the pre-registered analysis of
reproduce_analysis.py) and the curves (.png). A DIR that holds them is
refused: a finished reproduction is never overwritten.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Callable, Sequence

from mgrpo_jax import reproduce_protocol as protocol
from mgrpo_jax import reproduce_report
from mgrpo_jax.bench.common import cpu_model
from mgrpo_jax.runtime.config_checks import load_config_file, usage_error

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "reproduce.py"
# Overrides on configs/reproduce.py that make each arm.
ARMS: dict[str, dict[str, object]] = {
    "frozen_sub": {"mode": "frozen_sub"},
    "mgrpo": {"mode": "mgrpo"},
    "mgrpo_no_credit": {"mode": "mgrpo", "reward.v_main": 0.0},
    # The paper's composite sub-agent reward: the main outcome's credit and
    # the rule expert's score of the sub-agent's own report.
    "mgrpo_expert": {"mode": "mgrpo", "reward.preset": "with_expert"},
    "single_agent": {"mode": "single",
                     # 5 turns are needed (search, visit per hop, answer);
                     # the team has 1 turn of slack per agent and hop (main
                     # 4 for 3, sub 4 for 3 per hop): 3 here.
                     "agents.main.max_turns": 8,
                     # Twice the questions per step: the single agent samples
                     # about half the team's tokens per rollout, so this
                     # matches the team's sampled tokens per step.
                     "train.questions_per_step": 16},
}
PRIMARY = ("frozen_sub", "mgrpo")  # The pre-registered comparison's pair.
# Seeds per arm of the main suite (0 .. n-1; PROTOCOL.md): the primary pair
# 8, the secondary arms 4, all on the same warm starts of those seeds.
MAIN_SEEDS = {"frozen_sub": 8, "mgrpo": 8, "mgrpo_no_credit": 4,
              "mgrpo_expert": 4, "single_agent": 4}
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
# Seconds of one full-size run per arm and of one warm start (SFT), on
# COST_CPU: the pilot's mgrpo runs (mgrpo_jax/reproduce_pilot.py) took
# 583-589 s with their SFT (144-150 s), 40 steps of 10-11 s and
# evaluations of 3-16 s; frozen_sub is estimated from them (without the
# sub-agent's update); single_agent from the suite's first single run (16
# questions x 8 turns: about 27 s a step with a test run beside it, so
# about 20 min alone). What a suite's time left is estimated from.
COST_CPU = "Intel Xeon family 6 model 167, 2 vCPUs"
COST = {"warm_start": 150.0, "frozen_sub": 330.0, "mgrpo": 470.0,
        "mgrpo_no_credit": 470.0, "mgrpo_expert": 490.0,
        "single_agent": 1200.0}
SUITES = ("main", "clean", "ablations")
DEFAULT_SEEDS = {"clean": 3, "ablations": 2}  # The main suite: MAIN_SEEDS.
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


def seeds_of(suite: str, arm: str, seeds: int | None, quick: bool) -> int:
  """Seeds of an arm: `seeds` if given, else 2 with quick, else the suite's
  (MAIN_SEEDS per arm for the main suite)."""
  if seeds is not None:
    return seeds
  if quick:
    return QUICK_SEEDS
  return MAIN_SEEDS[arm] if suite == "main" else DEFAULT_SEEDS[suite]


def plan(suite: str, arms: Sequence[str], seeds: int | None, quick: bool
         ) -> list[Run]:
  """The runs of one suite, seed-major (a seed's warm start is built once,
  by its first run, and reused by the others; a suite run in several
  sittings has every arm of the early seeds first)."""
  size = "quick" if quick else "full"
  runs = []
  if suite == "ablations":
    for seed in range(seeds_of(suite, "mgrpo", seeds, quick)):
      for name, overrides in ABLATIONS.items():
        runs.append(Run(suite, name, seed, f"{CONFIG}:{size}", tuple(
            {**ARMS["mgrpo"], **overrides}.items())))
    return runs
  config = f"{CONFIG}:{size}" + (":clean" if suite == "clean" else "")
  count = {arm: seeds_of(suite, arm, seeds, quick) for arm in arms}
  for seed in range(max(count.values())):
    for arm in arms:
      if seed < count[arm]:
        runs.append(Run(suite, arm, seed, config, tuple(ARMS[arm].items())))
  return runs


def command(run: Run, run_dir: pathlib.Path) -> list[str]:
  flags = [f"--config={run.config}", f"--config.seed={run.seed}",
           f"--config.run_dir={run_dir}"]
  flags += [f"--config.{k}={v}" for k, v in run.overrides]
  return [sys.executable, "-m", "mgrpo_jax.main", *flags]


FINISHED = "finished"  # Marker file of a run whose process ended well.


def run_once(run: Run, out: pathlib.Path, log) -> pathlib.Path:
  """Runs (or resumes, from its last checkpoint) one run's process, unless
  it finished before; returns its run directory."""
  run_dir = out / "runs" / run.directory_name
  if (run_dir / FINISHED).is_file():
    return run_dir
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
  # The seconds of the process that finished it (a resumed run's earlier
  # sittings are not counted).
  (run_dir / FINISHED).write_text(f"{time.perf_counter() - start}\n")
  return run_dir


@functools.lru_cache(maxsize=None)
def question_hops(config: str) -> dict[str, int]:
  """Test question id -> hops of the world a run's `--config` describes."""
  from mgrpo_jax.data.world import WorldConfig, generate_world  # pylint: disable=g-import-not-at-top
  world_config = load_config_file(config).world
  world = generate_world(WorldConfig(**world_config.to_dict()))
  return {t.task_id: int(t.hops) for t in world.splits["test"]}


def with_hops(result: dict, run: Run) -> dict:
  """The result with its test questions' hop counts (for the analysis'
  accuracy by hop count), where it has per-question outcomes."""
  if "test_question_ids" in result and "test_question_hops" not in result:
    hops = question_hops(run.config)
    result["test_question_hops"] = [hops[q] for q in
                                    result["test_question_ids"]]
  return result


def execute(run: Run, out: pathlib.Path, log) -> dict:
  """Runs (or resumes) one run; returns its result (cached in result.json).
  The log says when a run finished, not its test accuracy: the suite's
  figures are first read in its report."""
  run_dir = out / "runs" / run.directory_name
  result_file = run_dir / "result.json"
  if result_file.is_file():
    result = json.loads(result_file.read_text())
    if "test_question_hops" not in result and "test_question_ids" in result:
      result_file.write_text(json.dumps(with_hops(result, run), indent=1)
                             + "\n")
    return result
  run_dir = run_once(run, out, log)
  result = reproduce_report.run_result(run_dir, suite=run.suite,
                                       name=run.name, seed=run.seed)
  result["seconds"] = float((run_dir / FINISHED).read_text())
  result["cpu"] = cpu_model()  # A suite run in sittings may span machines.
  result_file.write_text(json.dumps(with_hops(result, run), indent=1) + "\n")
  log(f"{run.directory_name}: finished, {result['sampled_tokens']:.0f} "
      f"sampled tokens, {result['seconds']:.0f} s")
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
                      help="seeds per arm (default: the main suite's "
                      "MAIN_SEEDS, 3 for clean, 2 for ablations and with "
                      "--quick)")
  parser.add_argument("--finished", default=None,
                      help="a folder of finished runs' results "
                      "(<run>/result.json, e.g. a suite's partial results "
                      "committed by an earlier sitting) taken as finished")
  parser.add_argument("--protocol", default=str(protocol.PROTOCOL),
                      help="the pre-registered design the main suite is "
                      "checked against before any run (default "
                      "launch/results/reproduce/PROTOCOL.md; 'none': no "
                      "check; --quick never checks)")
  args = parser.parse_args(argv)
  if args.suite is None:
    args.suite = "main"
  args.suites = comma_list("--suite", args.suite, SUITES)
  args.arm_list = comma_list("--arms", args.arms, list(ARMS))
  if args.seeds is not None and args.seeds < 1:
    usage_error(f"--seeds={args.seeds}: expected an integer >= 1 (seeds "
                "per arm).")
  if args.out is None:
    args.out = "runs/reproduce_quick" if args.quick else "runs/reproduce"
  return args


def estimate(runs: Sequence[Run], out: pathlib.Path) -> float:
  """Seconds the runs not yet finished in `out` will take on the CPU that
  measured COST (a warm start counted once per seed and layout, unless an
  earlier run of the suite built it)."""
  total, built = 0.0, set()
  for run in runs:
    run_dir = out / "runs" / run.directory_name
    layout = "single" if dict(run.overrides)["mode"] == "single" else "multi"
    if not (run_dir / FINISHED).is_file():
      total += COST.get(run.name, COST["mgrpo"])  # Ablations: as mgrpo.
      if (run.seed, layout) not in built:
        total += COST["warm_start"]
    built.add((run.seed, layout))
  return total


def take_finished(folder: pathlib.Path, runs: Sequence[Run],
                  out: pathlib.Path) -> list[str]:
  """Copies the result.json of every run `folder` holds (folder/<run>/)
  into `out`, where it makes the run finished; returns their names. A run
  `out` already holds is left alone."""
  if not folder.is_dir():
    usage_error(f"--finished={folder}: no such folder; expected one holding "
                "<run>/result.json files of finished runs.")
  taken = []
  for run in runs:
    source = folder / run.directory_name / "result.json"
    target = out / "runs" / run.directory_name / "result.json"
    if source.is_file() and not target.exists():
      result = json.loads(source.read_text())
      if (result.get("arm"), result.get("seed")) != (run.name, run.seed):
        usage_error(f"{source}: holds {result.get('arm')!r} seed "
                    f"{result.get('seed')!r}; expected {run.name!r} seed "
                    f"{run.seed}.")
      target.parent.mkdir(parents=True, exist_ok=True)
      target.write_text(source.read_text())
      taken.append(run.directory_name)
  return taken


def check_protocol(args, suite: str, runs: Sequence[Run]) -> None:
  """The main full suite must be the pre-registered one (see
  reproduce_protocol.py); --quick, other suites and --protocol=none are not
  checked."""
  if suite != "main" or args.quick or args.protocol == "none":
    return
  arms = {arm: ARMS[arm] for arm in args.arm_list}
  seeds = {arm: seeds_of("main", arm, args.seeds, False)
           for arm in args.arm_list}
  planned = protocol.design(arms, seeds, PRIMARY)
  try:
    protocol.check(args.protocol, planned, [(r.name, r.seed) for r in runs])
  except protocol.ProtocolError as e:
    usage_error(str(e))


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  out = pathlib.Path(args.out).resolve()
  finished = [reproduce_report.output_of(s) for s in args.suites
              if (out / reproduce_report.output_of(s)).exists()]
  if finished:
    usage_error(f"--out={args.out}: holds a finished reproduction "
                f"({', '.join(sorted(set(finished)))}); it is never "
                "overwritten: choose another --out, or move it away.")
  plans = {suite: plan(suite, args.arm_list, args.seeds, args.quick)
           for suite in args.suites}
  for suite, runs in plans.items():  # Every check before any run.
    check_protocol(args, suite, runs)
  if args.finished is not None:
    for runs in plans.values():
      take_finished(pathlib.Path(args.finished), runs, out)
  log = lambda message: print(f"[reproduce] {message}", flush=True)
  start = time.perf_counter()
  for suite, runs in plans.items():
    left = estimate(runs, out) if not args.quick else None
    log(f"suite {suite}: {len(runs)} runs"
        + (f"; about {left / 3600:.1f} h left on the CPU of COST "
           f"({COST_CPU})" if left else ""))
    results = [execute(run, out, log) for run in runs]
    if suite == "ablations":
      references = [execute(run, out, log) for run in plan(
          "main", ["mgrpo"], seeds_of("ablations", "mgrpo", args.seeds,
                                      args.quick), args.quick)]
      results = references + results
    written = reproduce_report.write(out, suite, results)
    log(f"suite {suite}: wrote {', '.join(map(str, written))}")
  log(f"done in {time.perf_counter() - start:.0f} s")
  return 0


def cli(entry: Callable[[], int], name: str) -> None:
  """Runs a command's `entry`; a RuntimeError (a run that failed, a result
  that cannot be read) ends it with one line on stderr and exit code 1."""
  try:
    sys.exit(entry())
  except RuntimeError as e:
    print(f"{name}: {e}", file=sys.stderr)
    sys.exit(1)


def comma_list(flag: str, value: str, known: Sequence[str]) -> list[str]:
  """The names of a comma-separated flag, each one of `known` (else a usage
  error naming the flag, the unknown names and the known ones)."""
  given = [x for x in value.split(",") if x]
  unknown = [x for x in given if x not in known]
  if unknown or not given:
    usage_error(f"{flag}={value!r}: "
                f"{'unknown ' + ', '.join(map(repr, unknown)) if unknown else 'empty'}; "
                f"expected a comma-separated list of {', '.join(known)}.")
  return given


if __name__ == "__main__":
  cli(main, "reproduce")
