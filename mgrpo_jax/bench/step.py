"""One M-GRPO step of a training config, split by phase.

  python -m mgrpo_jax.bench.step [--config=configs/default.py] [--steps=8]
      [--warmup=3] [--shapes=open,closed] [--json=runs/bench/step.json]

Runs the config (both sides in this process, role "all") for --steps steps
in a fresh temporary run directory (the warm start comes from the keyed
cache when a run of the same settings made it before), evaluating only at
the end, and reads the step records the trainer wrote. After --warmup steps
(compilation of the samplers' and learners' shapes) it reports the seconds
of each phase of the median step (by its total; "other" is what no phase
timer covers: checkpoint bookkeeping, the progress bar), M-GRPO's own overhead (advantages, alignment,
packing and the shared store's I/O, the work a plain GRPO learner of one
agent would not do) as a share of the step, XLA compilations per 100 steps
after warm-up (from `jit/compilations`) and how many of them the persistent
compilation cache answered (`jit/cache_loads`: programs an earlier run
compiled, loaded in a fraction of the time), and the process' peak memory.

With `--shapes=open,closed` the config runs twice, with its samplers' and
learners' shapes open (`config.runtime.shapes="open"`: compiled when first
met) and closed (compiled at start-up, train/compiled.py); the JSON's top
level holds the open run, "closed" the closed one, with the programs each
agent compiled at start-up, how long that took, and the compilations
after the first step (the closed set's target: 0).
"""

from __future__ import annotations

import json
import pathlib
import resource
import statistics
import tempfile

import jax
from absl import app
from absl import flags

from mgrpo_jax.bench.common import machine
from mgrpo_jax.runtime.config_checks import load_config_file

# Phase -> how it is read from a step record (seconds). Sub-agent kinds
# add theirs (`_phases`).
MAIN_PHASES = {
    "rollout": lambda r: r["time/rollout"],
    "load sub weights": lambda r: r.get("time/weights", 0.0),
    "store write": lambda r: r.get("time/store", 0.0),
    "main advantages + pack": lambda r: r["time/main_batch"],
    "main learner": lambda r: r["time/main_update"] - r["time/main_batch"],
}
# What only M-GRPO does (a single-agent GRPO step would have none of it).
OVERHEAD_MAIN = ("load sub weights", "store write", "main advantages + pack")
OVERHEAD_KIND = ("{kind} store read", "{kind} align + advantages + pack",
                 "{kind} publish")


def _phases(kinds: tuple[str, ...]) -> dict:
  phases = dict(MAIN_PHASES)
  for kind in kinds:
    def parts(r, kind=kind):
      return (r[f"time/{kind}_read"], r[f"time/{kind}_batch"],
              r[f"time/{kind}_publish"], r[f"time/{kind}_update"])
    phases[f"{kind} store read"] = lambda r, p=parts: p(r)[0]
    phases[f"{kind} align + advantages + pack"] = lambda r, p=parts: p(r)[1]
    phases[f"{kind} publish"] = lambda r, p=parts: p(r)[2]
    phases[f"{kind} learner"] = lambda r, p=parts: p(r)[3] - sum(p(r)[:3])
  return phases


def split(records: list[dict], kinds: tuple[str, ...], warmup: int) -> dict:
  """Seconds per phase of the median step (by total) among the step
  records after `warmup` steps (the last step, which evaluates, left out),
  the overhead's share and compilations per 100 steps after warm-up."""
  steps = [r for r in records if "time/step" in r]
  timed = [r for r in steps if warmup < r["step"] < steps[-1]["step"]]
  if not timed:
    raise ValueError(f"{len(steps)} step records leave none to time after "
                     f"warmup={warmup} and the final (evaluating) step: "
                     "expected steps >= warmup + 2.")
  # The phases of one real step, the median one (so they add up to it).
  total = statistics.median_low(r["time/step"] for r in timed)
  median = next(r for r in timed if r["time/step"] == total)
  seconds = {name: f(median) for name, f in _phases(kinds).items()}
  seconds["other"] = total - sum(seconds.values())
  overhead = sum(seconds[n] for n in OVERHEAD_MAIN) + sum(
      seconds[o.format(kind=k)] for o in OVERHEAD_KIND for k in kinds)
  # Cumulative counts from the end of warm-up to the last timed step (the
  # final step's evaluation compiles its own shapes).
  window = [r for r in steps if warmup <= r["step"] < steps[-1]["step"]]

  def per_100(count) -> float:
    if len(window) < 2:
      return float("nan")
    return 100.0 * (count(window[-1]) - count(window[0])) / (len(window) - 1)

  first = steps[0]  # The first step: start-up's last compilations.
  return {"step_seconds": total, "phases": seconds,
          "compilations_after_first_step": (
              window[-1]["jit/compilations"] - first["jit/compilations"]
              if window else float("nan")),
          "startup": {k[len("startup/"):]: v for k, v in first.items()
                      if k.startswith("startup/")},
          "overhead_seconds": overhead, "overhead_share": overhead / total,
          "timed_steps": len(timed),
          "compilations_per_100_steps": per_100(
              lambda r: r["jit/compilations"]),
          "cache_loads_per_100_steps": per_100(
              lambda r: r.get("jit/cache_loads", 0.0))}


def peak_memory() -> dict:
  """Peak resident memory of this process (MiB) and, where the backend
  reports it, each accelerator's peak bytes in use."""
  out = {"host_rss_mib": resource.getrusage(
      resource.RUSAGE_SELF).ru_maxrss / 1024}
  for device in jax.local_devices():
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
      out[f"{device}_peak_mib"] = stats["peak_bytes_in_use"] / 2**20
  return out


def measure(config, *, steps: int, warmup: int,
            shapes: str | None = None) -> dict:
  """Runs `config` for `steps` steps in a temporary run directory (with
  `config.runtime.shapes=shapes` unless None) and returns the split (see
  the module docstring)."""
  from mgrpo_jax.train import trainer
  if not isinstance(warmup, int) or warmup < 0 or not isinstance(
      steps, int) or steps < warmup + 2:
    raise ValueError(f"steps={steps!r}, warmup={warmup!r}: expected "
                     "warmup >= 0 and steps >= warmup + 2 (the warm-up "
                     "steps and the final, evaluating step are not timed).")
  config = config.copy_and_resolve_references()
  with tempfile.TemporaryDirectory(prefix="mgrpo_jax_bench_step_") as tmp:
    config.run_dir = tmp
    config.train.steps = steps
    config.train.eval_every = steps
    if shapes is not None:
      config.runtime.shapes = shapes
    trainer.check_config(config, "all")
    trainer.run(config, log=lambda line: None)
    records = [json.loads(line) for line in
               (pathlib.Path(tmp) / "all" / "metrics.jsonl").open()]
  kinds = (tuple(config.agents.sub_kinds) if config.mode == "mgrpo"
           else ())
  return {**split(records, kinds, warmup), "memory": peak_memory()}


def _define_flags():
  """The command line's flags, defined only when this module runs as a
  program (so tests can import it beside other benchmarks' flags)."""
  return (flags.DEFINE_string("config", "configs/default.py",
                              "Training config file."),
          flags.DEFINE_integer("steps", 8, "Training steps to run."),
          flags.DEFINE_integer("warmup", 3, "First steps left out (they "
                               "compile)."),
          flags.DEFINE_list("shapes", ["open", "closed"], "config.runtime."
                            "shapes of the runs: the first's figures are the "
                            "JSON's top level, a second's go under its name."),
          flags.DEFINE_string("json", "runs/bench/step.json",
                              "Where to write the results as JSON."))


def main(argv):
  del argv
  config_flag, steps_flag, warmup_flag, shapes_flag, json_flag = _FLAGS
  if not shapes_flag.value or len(set(shapes_flag.value)) != len(
      shapes_flag.value) or not set(shapes_flag.value) <= {"open", "closed"}:
    raise app.UsageError(f"--shapes={','.join(shapes_flag.value)}: expected "
                         "open, closed or both, e.g. open,closed")
  from mgrpo_jax.models.loading import enable_compilation_cache
  from mgrpo_jax.runtime import logs
  logs.configure()
  enable_compilation_cache()
  config = load_config_file(config_flag.value)
  first, *others = shapes_flag.value
  results = {"machine": machine(), "jax": jax.__version__,
             "config": config_flag.value, "steps": steps_flag.value,
             "warmup": warmup_flag.value, "shapes": first,
             **measure(config, steps=steps_flag.value,
                       warmup=warmup_flag.value, shapes=first)}
  for other in others:
    results[other] = measure(config, steps=steps_flag.value,
                             warmup=warmup_flag.value, shapes=other)
  print(table(results))
  path = pathlib.Path(json_flag.value)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(results, indent=1))
  print(f"wrote {path}")


def table(results: dict) -> str:
  lines = [f"one M-GRPO step of {results['config']} ({results['machine']}; "
           f"median of {results['timed_steps']} steps after "
           f"{results['warmup']} warm-up steps)",
           "| phase | seconds | share of the step |", "|---|---|---|"]
  total = results["step_seconds"]
  for name, seconds in results["phases"].items():
    lines.append(f"| {name} | {seconds:.3f} | {seconds / total:.1%} |")
  lines.append(f"| **step** | {total:.3f} | 100% |")
  lines.append(f"M-GRPO's own overhead (advantages, alignment, packing, "
               f"store I/O): {results['overhead_seconds']:.3f} s = "
               f"{results['overhead_share']:.2%} of the step (target < 2%)")
  lines.append(f"compilations per 100 steps after warm-up: "
               f"{results['compilations_per_100_steps']:.0f} (target 0), of "
               f"which {results['cache_loads_per_100_steps']:.0f} loaded from "
               "the persistent compilation cache")
  lines.append("peak memory: " + ", ".join(
      f"{k} {v:.0f}" for k, v in results["memory"].items()))
  closed = results.get("closed")
  if closed:
    lines.append(f"closed shapes: step {closed['step_seconds']:.3f} s "
                 f"against {total:.3f} s open; rollout "
                 f"{closed['phases']['rollout']:.3f} against "
                 f"{results['phases']['rollout']:.3f} s; compilations after "
                 f"the first step {closed['compilations_after_first_step']:.0f}"
                 f" (open: {results['compilations_after_first_step']:.0f}); "
                 "start-up: " + ", ".join(
                     f"{k} {v:.0f}" for k, v in closed["startup"].items()))
  return "\n".join(lines)


if __name__ == "__main__":
  _FLAGS = _define_flags()
  app.run(main)
