"""One role over two processes against the same run in one: step time.

  python -m mgrpo_jax.bench.multihost [--config=configs/default.py]
      [--steps=4] [--out=runs/bench/multihost]

Runs `python -m mgrpo_jax.main` twice on CPU devices, each agent on a
4-device mesh, sampling on one device per process, the step's rollouts in
2 shards (`train.rollout_shards=2`):

  1x4  one process with 4 devices (the reference)
  2x2  two processes with 2 devices each, one jax.distributed system over
       gloo on the loopback (`--distributed=explicit`), as the hosts of a
       slice run a role

and prints, side by side, the median seconds of a step and of its phases
over the steps after the first (which compiles), how many of the figures
both runs log are equal, and the largest relative difference of the others
(the same run to float32 rounding; tests/multihost_test.py holds it
exactly where it must be). `--reuse` compares the runs already in --out. The
warm start comes from the cache (the first run trains it when missing).
On a 2-core machine the two processes share the cores the one process has
to itself: read 2x2 / 1x4 as the cost of the distributed plumbing here, not
as a slice's scaling.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
from typing import Sequence

from absl import app
from absl import flags

from mgrpo_jax.bench.common import machine

PHASES = ("time/step", "time/rollout", "time/main_update", "time/sub_update")
LAYOUT = ["--config.mesh.share=True", "--config.train.rollout_shards=2",
          *(f"--config.mesh.{a}.{f}={n}" for a in ("main", "sub")
            for f, n in (("devices", 4), ("sampler_devices", 1)))]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(devices: int) -> dict[str, str]:
  return {**os.environ, "JAX_PLATFORMS": "cpu",
          "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}


def run_layout(config: str, steps: int, out: pathlib.Path, processes: int
               ) -> list[dict]:
  """Runs the config as `processes` x (4 / processes) devices; the metrics
  records process 0 wrote."""
  run_dir = out / f"{processes}x{4 // processes}"
  shutil.rmtree(run_dir, ignore_errors=True)  # A fresh run, not a resume.
  command = [sys.executable, "-m", "mgrpo_jax.main", f"--config={config}",
             f"--config.run_dir={run_dir}", f"--config.train.steps={steps}",
             f"--config.train.eval_every={steps}", *LAYOUT]
  coordinator = f"127.0.0.1:{_free_port()}"
  children = []
  for i in range(processes):
    extra = ([] if processes == 1 else [
        "--distributed=explicit", f"--coordinator_address={coordinator}",
        f"--num_processes={processes}", f"--process_id={i}"])
    log = open(out / f"{run_dir.name}_{i}.log", "w", encoding="utf-8")
    children.append((subprocess.Popen(command + extra,
                                      env=_env(4 // processes), stdout=log,
                                      stderr=subprocess.STDOUT), log))
  codes = []
  for child, log in children:
    codes.append(child.wait())
    log.close()
  if any(codes):
    raise RuntimeError(f"{run_dir.name}: exit codes {codes}; see "
                       f"{out}/{run_dir.name}_*.log")
  path = run_dir / "all" / "metrics.jsonl"
  return [json.loads(line) for line in path.read_text().splitlines()]


def compare(one: Sequence[dict], two: Sequence[dict]) -> dict:
  """Median phase seconds of each layout (steps after the first) and the
  largest relative difference of the step figures both logged."""
  steps = lambda records: {r["step"]: r for r in records
                           if "time/step" in r}
  a, b = steps(one), steps(two)
  later = sorted(s for s in a if s > min(a))
  if not later or sorted(a) != sorted(b):
    raise ValueError(f"steps logged: 1x4 {sorted(a)}, 2x2 {sorted(b)}; "
                     "expected the same steps, at least two.")
  medians = {name: {p: statistics.median(r[s][p] for s in later)
                    for p in PHASES}
             for name, r in (("1x4", a), ("2x2", b))}
  gap, logp_gap, equal, compared = 0.0, 0.0, 0, 0
  for s in a:
    for key, value in a[s].items():
      # Timings, rates, compile counts and weight checksums (bit patterns:
      # float32 rounding moves them far) are not figures of the run.
      if (key == "step" or key.startswith(("time", "jit/", "weights/"))
          or key.endswith(("per_second", "_checksum"))
          or key not in b[s] or not isinstance(value, (int, float))):
        continue
      compared += 1
      equal += value == b[s][key]
      if key.endswith("logp_gap_max"):  # float32 noise itself: absolute.
        logp_gap = max(logp_gap, abs(value - b[s][key]))
        continue
      scale = max(abs(value), abs(b[s][key]), 1e-12)
      gap = max(gap, abs(value - b[s][key]) / scale)
  return {"steps": later, "medians": medians, "largest_relative_gap": gap,
          "logp_gap_abs": logp_gap, "figures_equal": equal,
          "figures_compared": compared}


def table(result: dict) -> str:
  m = result["medians"]
  lines = [f"one role, 1 process x 4 devices vs 2 processes x 2 devices "
           f"({result['machine']}; median of steps {result['steps']})",
           "| phase | 1x4 s | 2x2 s | 2x2 / 1x4 |", "|---|---|---|---|"]
  for p in PHASES:
    lines.append(f"| {p} | {m['1x4'][p]:.2f} | {m['2x2'][p]:.2f} | "
                 f"{m['2x2'][p] / max(m['1x4'][p], 1e-9):.2f}x |")
  lines.append(f"logged figures: {result['figures_equal']} of "
               f"{result['figures_compared']} equal; largest relative "
               f"difference {result['largest_relative_gap']:.1e} (the "
               "learner-sampler log-prob gaps aside, which differ by "
               f"{result['logp_gap_abs']:.0e} at most)")
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  if _STEPS.value < 2:
    raise app.UsageError(f"--steps={_STEPS.value}: expected at least 2 (the "
                         "first step compiles and is left out).")
  out = pathlib.Path(_OUT.value)
  out.mkdir(parents=True, exist_ok=True)
  if _REUSE.value:  # The runs an earlier call left in --out.
    read = lambda name: [json.loads(line) for line in (
        out / name / "all" / "metrics.jsonl").read_text().splitlines()]
    one, two = read("1x4"), read("2x2")
  else:
    one = run_layout(_CONFIG.value, _STEPS.value, out, 1)
    two = run_layout(_CONFIG.value, _STEPS.value, out, 2)
  result = {"machine": machine(), "config": _CONFIG.value,
            **compare(one, two)}
  print(table(result))
  (out / "multihost.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
  _CONFIG = flags.DEFINE_string("config", "configs/default.py",
                                "Training config file.")
  _STEPS = flags.DEFINE_integer("steps", 4, "M-GRPO steps per layout.")
  _OUT = flags.DEFINE_string("out", "runs/bench/multihost",
                             "Where the runs and multihost.json go.")
  _REUSE = flags.DEFINE_bool("reuse", False, "Compare the runs an earlier "
                             "call left in --out instead of running them.")
  app.run(main)
