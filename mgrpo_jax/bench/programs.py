"""The closed set of compiled programs of a training config, per agent.

  python -m mgrpo_jax.bench.programs [--config=configs/default.py]
      [--json=runs/bench/programs.json]

What a run with `config.runtime.shapes="closed"` compiles at start-up
(train/compiled.py), measured in two fresh processes that share a new,
empty persistent compilation cache: the first start compiles every
program, the second loads them. Each process builds every agent's sampler
(`Engine` with the config's closed `Shapes`) and learner on a model of
config.model's shapes with random weights (compile time does not depend
on the weights; SmolLM2's shapes come from its config.json) and
precompiles them, as the trainer does, one agent after another: a
sampler whose model structure, shapes and devices are an earlier agent's
reuses its programs (0 s). Reported per agent and part: programs in the
set and seconds, for each start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from absl import app
from absl import flags

from mgrpo_jax.bench.common import machine, write_output

STARTS = ("first start (empty cache)", "second start (cache loads)")


def compile_all(config) -> dict[str, dict[str, list[float]]]:
  """{agent: {"sampler": [programs, seconds], "learner": [...]}} of this
  process, `config.runtime.shapes` set to "closed"."""
  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.agents.team import engine_shapes, sub_kinds
  from mgrpo_jax.bench.memory import model_config
  from mgrpo_jax.models import build
  from mgrpo_jax.sampling import Engine
  from mgrpo_jax.train import compiled
  from mgrpo_jax.train.learner import Learner
  from mgrpo_jax.train.side import learner_config
  from mgrpo_jax.train.team_build import agents_section
  config.runtime.shapes = "closed"
  agents_cfg = agents_section(config)
  model = build.init_model(model_config(config), seed=0)
  out = {}
  for agent in ["main", *sub_kinds(agents_cfg)]:
    section = agents_cfg[agent]
    engine = Engine(model, max_conversations=section.rows,
                    cache_len=section.context_tokens, chunk_steps=16,
                    weights_dtype=agents_cfg.sampler_dtype,
                    shapes=engine_shapes(config.runtime, section))
    start = time.perf_counter()
    n, _ = engine.precompile(8, threads=config.runtime.compile_threads)
    sampler = [n, time.perf_counter() - start]
    learner = Learner(agent, model, learner_config(config, agent),
                      temperature=agents_cfg.temperature)
    start = time.perf_counter()
    n, _ = learner.precompile(compiled.batch_rows(config, agent),
                              compiled.learner_lengths(config.learner[agent]))
    out[agent] = {"sampler": sampler,
                  "learner": [n, time.perf_counter() - start]}
  return out


def measure(config_path: str) -> dict[str, Any]:
  """Both starts, each its own process, over one fresh cache folder."""
  with tempfile.TemporaryDirectory(prefix="mgrpo_jax_programs_") as cache:
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache}
    starts = {}
    for start in STARTS:
      text = subprocess.check_output(
          [sys.executable, "-m", "mgrpo_jax.bench.programs", "--child",
           f"--config={config_path}"], env=env, text=True)
      starts[start] = json.loads(text.strip().splitlines()[-1])
  return {"config": config_path, "starts": starts}


def table(result: dict[str, Any]) -> str:
  lines = ["| agent, part | programs | " + " | ".join(
      f"seconds, {s}" for s in result["starts"]) + " |",
           "|---|---|" + "---|" * len(result["starts"])]
  first = next(iter(result["starts"].values()))
  for agent, parts in first.items():
    for part, (n, _) in parts.items():
      lines.append(f"| {agent} {part} | {n:.0f} | " + " | ".join(
          f"{s[agent][part][1]:.1f}" for s in result["starts"].values())
                   + " |")
  totals = [sum(p[1] for parts in s.values() for p in parts.values())
            for s in result["starts"].values()]
  count = sum(p[0] for parts in first.values() for p in parts.values())
  lines.append(f"| all | {count:.0f} | " + " | ".join(
      f"{t:.1f}" for t in totals) + " |")
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.runtime.config_checks import load_config_file
  if _CHILD.value:
    from mgrpo_jax.models.loading import enable_compilation_cache
    enable_compilation_cache()  # JAX_COMPILATION_CACHE_DIR: the parent's.
    print(json.dumps(compile_all(load_config_file(_CONFIG.value))))
    return
  load_config_file(_CONFIG.value)  # A bad path stops here, in one line.
  result = {"machine": machine(), **measure(_CONFIG.value)}
  print(f"{_CONFIG.value}: closed set of programs per agent "
        f"({result['machine']})")
  print(table(result))
  write_output(_JSON.value, result)


if __name__ == "__main__":
  _CONFIG = flags.DEFINE_string("config", "configs/default.py",
                                "Training config file.")
  _JSON = flags.DEFINE_string("json", "runs/bench/programs.json",
                              "Where to write the results ('': nowhere).")
  _CHILD = flags.DEFINE_bool("child", False, "Internal: one start, its "
                             "figures as JSON on the last line.")
  app.run(main)
