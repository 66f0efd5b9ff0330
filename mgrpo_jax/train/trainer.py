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
The same step with every sub-agent kind of `config.agents.sub_kinds`:

              data.batch(step) -> B questions, K rollouts each
                        |
     main side  agents.rollout: all B*K main conversations at once; each
     (mesh      delegation opens a conversation of that tool's sub-agent kind
      "main")   (delegate -> "sub", verify -> "verifier"); every kind's live
                conversations are batched in its own sampler
                        |
                rewards (main: format + correctness; each kind: format + the
                main outcome + expert); main advantages over K; main update
                        |
                store.write_step(step, {"sub.*": ..., "verifier.*": ...})
                        |                                   (no gradient, only
     each kind  store.read_step -> its own channel          records and weights
     (its own   -> align to [B, K, D_max of the kind]        cross this line)
      mesh,     -> advantages over its valid slots
      process   -> update -> store.publish_weights(kind, step + 1)
      optional)         |
                samplers load each kind's weights (rollout.load_weights):
                those of step n ("sync") or n - 1 ("one_step")

No gradient crosses agents: each learner sees only its own model; the sides
exchange only what the store carries. With `role="all"` both sides run in
one process (each agent on its own mesh); `role="main"` and `role="sub"`
(one `role="<kind>"` per kind of `config.agents.sub_kinds`) run them as
separate processes that share only the store's root (train/side.py).
With `role="all"` the two sides run one after the other: "one_step"
staleness there does not overlap anything, it only adds staleness (it pays
off with two processes, where the sub side trains step n while the main
side rolls out step n+1).

Baselines: `config.mode` "mgrpo" (both train), "frozen_sub" (only the
main agent trains), "single" (one agent with the tools) and, for the
positive controls (train/scripted.py), "frozen_main" (only the sub-agents
train).

Checkpoints and resume. Each agent checkpoints under
`<run_dir>/checkpoints/<agent>` (runtime/checkpoints.py: parameters,
optimizer state, step, data position, PRNG key), and the run writes the
model's architecture and tokenizer once to `<run_dir>/checkpoints/model`
(train/trained.py). The same command again resumes from the newest step
every agent saved, without repeating or skipping a step. The resumed run
builds the warm start again (read from its cache; retrained identically
with `sft.cache=False`): it is the frozen sub-agent of "frozen_sub" and the
KL reference of beta > 0, which are restored, never re-initialised. The
store keeps every sub-agent weight version a resume from a kept checkpoint
can need (the run prunes after each checkpoint, keeping the
`store.keep_weights` newest besides), so a run killed any number of steps
after its last checkpoint resumes. A step's metrics are written before its
checkpoint, so a run killed in between redoes that step on resume (same
seed, same numbers) and appends its record again; readers keep the newest
record of a step. Raising `train.steps` of a finished run continues it
exactly. Every agent's step 0, the warm start training began from, is
checkpointed and kept beside the newest `checkpoint.max_to_keep`, so the
start of a run can be evaluated after it finished.
tests/resume_test.py SIGKILLs runs 2 steps past their last checkpoint
(M-GRPO with "one_step" and beta > 0 in the default test run; mgrpo sync
and one_step, frozen_sub with beta > 0, single, and the extended run in
`bash launch/test_slow.sh`), resumes them, and checks every logged figure
of every step against an uninterrupted run with the same seed;
tests/trainer_test.py does the same for a kill right after a checkpoint.
"""

from __future__ import annotations

import time
from typing import Callable

import jax
import ml_collections

from mgrpo_jax.runtime import processes
from mgrpo_jax.runtime.metrics import (MetricsWriter, ProgressBar, Silent,
                                       cache_loads, compilations,
                                       count_compilations, eval_line)
from mgrpo_jax.train import compiled
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
  # One process of a role writes its metrics, progress and log lines; the
  # others' lines are details (shown with --verbosity=1).
  primary = processes.primary()
  if not primary:
    from mgrpo_jax.runtime import logs  # pylint: disable=g-import-not-at-top
    log = lambda line: logs.detail(f"process {processes.index()}: {line}")
  side = Side(config, role, log)
  # A closed set of programs compiles here; its figures join the first
  # step's metrics.
  startup = compiled.precompile(
      config, side.controller, side.learners, log,
      main_local=side.shards is not None and side.shards.partial)
  c = config.train
  key = jax.random.key(config.seed)
  writer = (MetricsWriter(f"{absolute(config.run_dir)}/{role}") if primary
            else Silent())
  last: dict[str, float] = {}
  if side.start_step == 0 and side.sft_metrics:
    writer.write(0, side.sft_metrics)
  for kind in side.trained_kinds:
    side.publish(kind, side.start_step)
  if side.samples:
    side.sync_main()
  if side.start_step == 0:
    side.save_start(key)
  bar = ProgressBar(c.steps, side.start_step) if primary else Silent()
  try:
    if side.samples and side.start_step == 0:
      metrics = side.evaluate(0)
      writer.write(0, metrics)
      last.update(metrics)
      log(eval_line(0, metrics))
    for step in range(side.start_step, c.steps):
      step_key = jax.random.fold_in(key, step)
      start = time.perf_counter()
      metrics: dict[str, float] = startup
      startup = {}
      if side.samples:
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
