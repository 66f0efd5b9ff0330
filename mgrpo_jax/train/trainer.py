"""The M-GRPO trainer of LLM agents: rollouts, rewards, store, learners.

One step (DESIGN.md "One training step"):
  1. the rollout side samples B questions of the train split and rolls each
     out K times with the team (agents/rollout.py), scores the rollouts
     (agents/rewards.py);
  2. the main side writes the step's sub-agent trajectories and rewards to
     the shared store and updates the main agent (train/learner.py);
  3. the sub side reads the step from the store, aligns it to
     [B, K, D_max], updates the sub-agent and publishes its weights;
  4. the samplers load the new weights (the sub-agent's from the store:
     those of step n with staleness "sync", of step n-1 with "one_step").
No gradient crosses agents: each learner sees only its own model; the sides
exchange only what the store carries. With `role="all"` both sides run in
one process (each agent on its own mesh); `role="main"` and `role="sub"`
run them as separate processes that share only the store's root.

Baselines (METHOD.md): `config.mode` "mgrpo" (both train), "frozen_sub"
(only the main agent trains) and "single" (one agent with the tools).
"""

from __future__ import annotations

import time
from typing import Callable

import jax
import ml_collections

from mgrpo_jax.runtime.metrics import (MetricsWriter, ProgressBar,
                                       cache_loads, compilations,
                                       count_compilations, eval_line)
from mgrpo_jax.train.run_checks import check_run_config
from mgrpo_jax.train.side import Side, absolute


def check_config(config: ml_collections.ConfigDict, role: str) -> None:
  """Config errors that can be found before any compute (run_checks.py)."""
  check_run_config(config, role)


OnLog = Callable[[int, dict[str, float]], None]


def run(config: ml_collections.ConfigDict, *, role: str = "all",
        on_log: OnLog | None = None,
        log: Callable[[str], None] = print) -> dict[str, float]:
  """Trains for `config.train.steps` steps (resuming from checkpoints);
  returns the last logged metrics."""
  count_compilations()
  side = Side(config, role, log)
  c = config.train
  key = jax.random.key(config.seed)
  writer = MetricsWriter(f"{absolute(config.run_dir)}/{role}")
  last: dict[str, float] = {}
  if side.start_step == 0 and side.sft_metrics:
    writer.write(0, side.sft_metrics)
  for kind in side.trained_kinds:
    side.publish(kind, side.start_step)
  if side.samples:
    side.sync_main()
  if side.start_step == 0:
    side.save_start(key)
  bar = ProgressBar(c.steps, side.start_step)
  try:
    if side.samples and side.start_step == 0:
      metrics = side.evaluate(0)
      writer.write(0, metrics)
      last.update(metrics)
      log(eval_line(0, metrics))
    for step in range(side.start_step, c.steps):
      step_key = jax.random.fold_in(key, step)
      start = time.perf_counter()
      metrics: dict[str, float] = {}
      if side.main is not None:
        metrics.update(side.main_step(step, step_key))
      for kind in side.trained_kinds:
        metrics.update(side.sub_step(kind, step, step_key))
      done = step + 1
      if side.samples and (done % c.eval_every == 0 or done == c.steps):
        metrics.update(side.evaluate(done))
        log(eval_line(done, metrics))
      metrics["time/step"] = time.perf_counter() - start
      metrics["jit/compilations"] = float(compilations())
      metrics["jit/cache_loads"] = float(cache_loads())
      # Metrics first, then the checkpoint: a run killed between the two
      # redoes this step on resume (same seed, same numbers) and appends
      # its record again; killed the other way round it would lose it.
      writer.write(done, metrics)
      side.save(done, step_key, force=done == c.steps)
      bar.update(done, {k: metrics[k] for k in (
          "main/accuracy", "eval/accuracy", "sub/reward") if k in metrics})
      last = metrics
      if on_log is not None:
        on_log(done, metrics)
  finally:
    bar.close()
    writer.close()
    side.close()
  return last
