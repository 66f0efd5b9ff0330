"""A pretrained team's step time and peak memory, batch size by batch size.

  python -m mgrpo_jax.bench.team_memory [--config=configs/smollm2.py]
      [--sizes=4x4,8x4,8x8,16x8] [--plan_sizes=16x16] [--steps=3]
      [--warmup=1] [--limit_gib=24] [--json=runs/bench/team.json]

For each B x K of --sizes (questions per step x rollouts per question), in
order, one child process runs `bench.step.measure` on the config with that
batch (every size from the config's own warm start: `same_warm_start`) and
reports the median step's seconds by phase (rollout, main update, sub
update, the rest), the process's peak resident memory, and what the
memory holds by part at that size (bench.memory: weights, Adam, sampler
copies, KV caches, the update's temporaries; its total and largest part). The sweep stops
at the first size whose child dies (out of memory) or whose peak passes
--limit_gib: the largest size before it is the largest that fits. Each size
is its own process because peak memory (ru_maxrss) only ever grows.
--plan_sizes are sizes too slow to run here (a SmolLM2 step grows with
B x K): only estimated, from their planned memory and the largest run
size's measured overhead (`plan`).
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import subprocess
import sys
import tempfile
from typing import Sequence

from absl import app
from absl import flags

from mgrpo_jax.bench.common import machine
from mgrpo_jax.train.warm_start import FIGURES, warm_start_dir

# Phases of bench.step reported per size: rollout, each agent's update
# (its advantages, packing and learner), and the rest.
UPDATES = {"main update": ("main advantages + pack", "main learner"),
           "sub update": ("sub store read", "sub align + advantages + pack",
                          "sub learner", "sub publish")}


def parse_sizes(text: str) -> list[tuple[int, int]]:
  """"4x4,8x4" -> [(4, 4), (8, 4)]; ValueError naming a bad entry."""
  sizes = []
  for entry in filter(None, text.split(",")):
    parts = entry.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
      raise ValueError(f"--sizes: {entry!r} is not BxK with B, K positive "
                       "integers (e.g. 8x4).")
    sizes.append((int(parts[0]), int(parts[1])))
  if not sizes:
    raise ValueError("--sizes is empty; expected e.g. 4x4,8x4.")
  return sizes


def summarise(measured: dict) -> dict:
  """A child's bench.step result reduced to the figures this bench
  reports."""
  phases = measured["phases"]
  out = {"step_seconds": measured["step_seconds"],
         "rollout_seconds": phases["rollout"]}
  for name, parts in UPDATES.items():
    out[name.replace(" ", "_") + "_seconds"] = sum(phases.get(p, 0.0)
                                                   for p in parts)
  out["other_seconds"] = out["step_seconds"] - sum(
      v for k, v in out.items() if k not in ("step_seconds",))
  out["peak_host_gib"] = measured["memory"]["host_rss_mib"] / 1024
  if "parts" in measured:  # What the memory holds (bench.memory).
    parts = measured["parts"]
    out["planned_gib"] = parts["total_bytes"] / 1024 ** 3
    out["largest_part"] = parts["largest"]
    out["parts_gib"] = {k: v / 1024 ** 3 for k, v in parts["by_part"].items()}
  return out


def _child(config_path: str, size: tuple[int, int], steps: int, warmup: int,
           out: str) -> None:
  from mgrpo_jax.bench import memory, step  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.models.loading import enable_compilation_cache  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.runtime.config_checks import load_config_file  # pylint: disable=g-import-not-at-top
  enable_compilation_cache()
  config = load_config_file(config_path)
  own = warm_start_dir(config)
  config = sized(config, size)
  with same_warm_start(own, warm_start_dir(config)):
    measured = step.measure(config, steps=steps, warmup=warmup)
  measured["parts"] = memory.measure(config)
  measured["warm_start"] = own.name
  pathlib.Path(out).write_text(json.dumps(measured))


@contextlib.contextmanager
def same_warm_start(own: pathlib.Path, sized: pathlib.Path):
  """Every size starts from the config's own warm start. `agents.rows`
  is part of the warm-start key (the oracle's batch), so each size would
  otherwise retrain SFT (~13 min for SmolLM2) for a step whose time and
  memory do not depend on which demonstrations trained it. While the
  size runs, its key's entry points at the config's own (left alone when
  the size has an entry of its own or the config has none yet)."""
  link = (own != sized and not sized.exists()
          and (own / FIGURES).is_file())
  if link:
    sized.symlink_to(own.resolve(), target_is_directory=True)
  try:
    yield
  finally:
    if link and sized.is_symlink():
      sized.unlink()


def sweep(config_path: str, sizes: Sequence[tuple[int, int]], *, steps: int,
          warmup: int, limit_gib: float, log=print) -> dict:
  """The figures of each size that ran, and the largest that fits."""
  rows, largest, stopped = [], None, ""
  for b, k in sizes:
    with tempfile.TemporaryDirectory(prefix="mgrpo_jax_team_memory_") as tmp:
      out = pathlib.Path(tmp) / "step.json"
      code = subprocess.call([sys.executable, "-m",
                              "mgrpo_jax.bench.team_memory", "--child", f"--config={config_path}",
                              f"--sizes={b}x{k}", f"--steps={steps}",
                              f"--warmup={warmup}", f"--json={out}"])
      if code != 0 or not out.is_file():
        stopped = f"{b}x{k}: the child ended with exit code {code}"
        break
      row = {"B": b, "K": k, **summarise(json.loads(out.read_text()))}
    rows.append(row)
    log(f"{b}x{k}: step {row['step_seconds']:.1f} s, peak "
        f"{row['peak_host_gib']:.1f} GiB")
    if row["peak_host_gib"] > limit_gib:
      stopped = f"{b}x{k}: peak {row['peak_host_gib']:.1f} GiB > {limit_gib}"
      break
    largest = f"{b}x{k}"
  return {"sizes": rows, "largest_fitting": largest, "stopped": stopped,
          "limit_gib": limit_gib}


def sized(config, size: tuple[int, int]):
  """`config` at B x K = `size`, every conversation of a step live at once
  (agents.<agent>.rows = B x K: the KV caches grow)."""
  config.train.questions_per_step, config.train.group_size = size
  for side in ("main", "sub"):
    config.agents[side].rows = size[0] * size[1]
  return config


def plan(config_path: str, sizes: Sequence[tuple[int, int]],
         measured: Sequence[dict], limit_gib: float) -> dict:
  """Sizes too slow to run here, estimated: bench.memory's planned bytes
  at each size (from the config alone) plus what the largest measured
  size's peak held beyond its plan (the Python heap, JAX's runtime and
  programs, host copies). Nothing is run; the estimate assumes that
  overhead does not grow with B x K."""
  from mgrpo_jax.bench import memory  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.runtime.config_checks import load_config_file  # pylint: disable=g-import-not-at-top
  base = [r for r in measured if "planned_gib" in r]
  if not base:
    return {"planned_sizes": [], "largest_estimated": None}
  overhead = base[-1]["peak_host_gib"] - base[-1]["planned_gib"]
  rows, largest = [], None
  for b, k in sizes:
    config = sized(load_config_file(config_path), (b, k))
    planned = memory.measure(config)["total_bytes"] / 1024 ** 3
    rows.append({"B": b, "K": k, "planned_gib": planned,
                 "estimated_peak_gib": planned + overhead})
    if planned + overhead <= limit_gib:
      largest = f"{b}x{k}"
  return {"planned_sizes": rows, "largest_estimated": largest,
          "overhead_gib": overhead}


def table(results: dict) -> str:
  lines = [f"{results['config']} step by batch ({results['machine']})",
           "| B x K | step s | rollout s | main update s | sub update s | "
           "other s | peak host GiB | planned GiB (largest part) |",
           "|---|---|---|---|---|---|---|---|"]
  for r in results["sizes"]:
    planned = (f"{r['planned_gib']:.1f} ({r['largest_part']} "
               f"{r['parts_gib'][r['largest_part']]:.1f})"
               if "planned_gib" in r else "-")
    lines.append(f"| {r['B']}x{r['K']} | {r['step_seconds']:.1f} | "
                 f"{r['rollout_seconds']:.1f} | {r['main_update_seconds']:.1f}"
                 f" | {r['sub_update_seconds']:.1f} | "
                 f"{r['other_seconds']:.1f} | {r['peak_host_gib']:.1f} | "
                 f"{planned} |")
  for r in results.get("planned_sizes", ()):
    lines.append(f"| {r['B']}x{r['K']} (not run) | - | - | - | - | - | "
                 f"~{r['estimated_peak_gib']:.1f} (estimated) | "
                 f"{r['planned_gib']:.1f} |")
  lines.append(f"largest B x K within {results['limit_gib']} GiB: "
               f"{results['largest_fitting']}"
               + (f" (stopped at {results['stopped']})"
                  if results["stopped"] else " (every size run fits)"))
  if results.get("planned_sizes"):
    lines.append(
        f"largest estimated to fit: {results['largest_estimated']} (plan + "
        f"the largest run's {results['overhead_gib']:.1f} GiB beyond its "
        "plan; not run)")
  return "\n".join(lines)


def _define_flags():
  """The command line's flags, defined only when this module runs as a
  program (so tests can import it beside other benchmarks' flags)."""
  return (flags.DEFINE_string("config", "configs/smollm2.py",
                              "Training config file."),
          flags.DEFINE_string("sizes", "4x4,8x4,8x8,16x8",
                              "B x K sizes to run, in order."),
          flags.DEFINE_string("plan_sizes", "", "B x K sizes only "
                              "estimated (planned memory + the largest "
                              "run's overhead), after --sizes; '' none."),
          flags.DEFINE_integer("steps", 3, "Steps per size."),
          flags.DEFINE_integer("warmup", 1, "First steps left out."),
          flags.DEFINE_float("limit_gib", 24.0, "Memory a size must stay "
                             "within to fit (GiB)."),
          flags.DEFINE_string("json", "runs/bench/team.json",
                              "Where to write the results as JSON."),
          flags.DEFINE_bool("child", False, "Internal: measure one size."))


def main(argv):
  del argv
  config, sizes_flag, plan_flag, steps, warmup, limit, json_flag, child = (
      _FLAGS)
  try:
    sizes = parse_sizes(sizes_flag.value)
    planned = parse_sizes(plan_flag.value) if plan_flag.value else []
  except ValueError as e:
    raise app.UsageError(str(e))
  if child.value:
    _child(config.value, sizes[0], steps.value, warmup.value,
           json_flag.value)
    return
  results = {"machine": machine(), "config": config.value,
             "steps": steps.value, "warmup": warmup.value,
             **sweep(config.value, sizes, steps=steps.value,
                     warmup=warmup.value, limit_gib=limit.value)}
  if planned:
    results.update(plan(config.value, planned, results["sizes"],
                        limit.value))
  print(table(results))
  path = pathlib.Path(json_flag.value)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(results, indent=1))
  print(f"wrote {path}")


if __name__ == "__main__":
  _FLAGS = _define_flags()
  app.run(main)
