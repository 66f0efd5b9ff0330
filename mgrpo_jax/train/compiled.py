"""A training process's compiled programs: open, or a closed set compiled at
start-up (`config.runtime`).

With `runtime.shapes="open"` every sampler and learner program compiles
when a call first needs its shape, at any step of a run. With "closed",
each agent's shapes come from a short list derived from the config
(`agents.team.engine_shapes`: `sampling.shapes.Shapes`;
`learner_lengths`: `train.packing.closed_lengths`), and `precompile` compiles all of them
before the first step, through the persistent compilation cache (a second
start loads them): rows of a learner's batch are fixed by the config (B x
K, or B x K x D_max, rounded up to the micro-batch), its lengths are
the open ladder's (x1, 1.5, 2, 3, ... from `min_len` to `max_len`). With
`runtime.strict_shapes`
a call outside the set then stops the run (`runtime.programs.ShapeError`,
naming the program and the shape) instead of compiling. What else a step
compiles (the advantages, the alignment, checksums: one shape per config)
compiles in the first step.

A role over several processes: the main agent's learner compiles for the
share of each batch its process packs (`local`: the rows of its rollout
shards, train/shards.py), a sub-agent's for the whole batch (every process
of a sub role packs all of it).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import ml_collections

from mgrpo_jax.runtime import processes
from mgrpo_jax.runtime.config_checks import (boolean, choice, fail, get,
                                              integer)
from mgrpo_jax.train.packing import closed_lengths

SHAPES = ("open", "closed")


def check_runtime(config: ml_collections.ConfigDict,
                  agents: tuple[str, ...]) -> None:
  """Raises ConfigError for the first unusable `runtime` field (run_checks)."""
  shapes = choice(config, "runtime.shapes", SHAPES)
  strict = boolean(config, "runtime.strict_shapes")
  for field in ("decode_row_floor", "decode_windows", "prefill_windows",
                "compile_threads"):
    integer(config, f"runtime.{field}", minimum=1)
  # At least the engine's smallest padded prefill length.
  chunk = integer(config, "runtime.prefill_chunk", minimum=16)
  if shapes == "open":
    if strict:
      fail("runtime.strict_shapes", True, "False with runtime.shapes="
           "'open' (only a closed set is compiled at start-up; set "
           "runtime.shapes='closed')")
    return
  context = min(get(config, f"agents.{a}.context_tokens") for a in agents)
  if chunk > context:
    fail("runtime.prefill_chunk", chunk, f"at most {context}, the smallest "
         "agents.<agent>.context_tokens (no prefill call is longer than a "
         "context)")
  for kind in agents[1:] if get(config, "mode") == "mgrpo" else ():
    d_max = get(config, "align.d_max" if kind == "sub"
                else f"align.{kind}_d_max")
    if d_max == 0:
      fail("align.d_max" if kind == "sub" else f"align.{kind}_d_max", 0,
           "at least 1 with runtime.shapes='closed' (without alignment the "
           "sub-agent's batch has another shape every step)")


def learner_lengths(learner: ml_collections.ConfigDict) -> list[int]:
  """The padded lengths of a closed learner's batches."""
  return closed_lengths(learner.min_len, learner.max_len)


def batch_rows(config: ml_collections.ConfigDict, agent: str) -> int:
  """Rows of an agent's packed batch: B x K trajectories of the main agent,
  B x K x D_max of a sub-agent kind, up to a multiple of the micro-batch."""
  n = config.train.questions_per_step * config.train.group_size
  if agent != "main":
    n *= config.align.d_max if agent == "sub" else config.align[
        f"{agent}_d_max"]
  micro = config.learner[agent].micro_batch
  return -(-n // micro) * micro


def precompile(config: ml_collections.ConfigDict, controller: Any,
               learners: dict[str, Any], log: Callable[[str], None], *,
               main_local: bool = False) -> dict[str, float]:
  """Compiles every sampler's and learner's closed set (nothing with open
  shapes); logs and returns what it compiled and how long it took.
  `main_local`: this process packs only its rollout shards' rows of the
  main agent's batch (`Batch.local`)."""
  runtime = config.runtime
  if runtime.shapes != "closed":
    return {}
  strict = runtime.strict_shapes
  start = time.perf_counter()
  counts = {}
  if controller is not None:
    for name, (n, _) in controller.precompile(
        runtime.compile_threads, strict=strict).items():
      counts[f"{name} sampler"] = n
  for name, learner in learners.items():
    local = main_local and name == "main"
    rows = batch_rows(config, name) // (processes.count() if local else 1)
    n, _ = learner.precompile(rows, learner_lengths(config.learner[name]),
                              local=local, strict=strict)
    counts[f"{name} learner"] = n
  seconds = time.perf_counter() - start
  log(f"start-up: compiled {sum(counts.values())} programs in {seconds:.0f} "
      f"s (" + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")")
  return {"startup/programs": float(sum(counts.values())),
          "startup/compile_seconds": seconds,
          **{f"startup/programs/{k.replace(' ', '_')}": float(v)
             for k, v in counts.items()}}
