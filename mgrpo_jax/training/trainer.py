"""The M-GRPO trainer of LLM agents: rollouts, rewards, store, learners.

One step (DESIGN.md "One training step"):
  1. the rollout side samples B questions of the train split and rolls each
     out K times with the team (agents/rollout.py), scores the rollouts
     (agents/rewards.py);
  2. the main side writes the step's sub-agent trajectories and rewards to
     the shared store and updates the main agent (training/learner.py);
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

import dataclasses
import time
from typing import Any, Callable

import jax
import ml_collections
import numpy as np

from mgrpo_jax.agents.rewards import RuleExpert, is_correct, score_rollouts
from mgrpo_jax.agents.rollout import RolloutController
from mgrpo_jax.agents.team import build_team
from mgrpo_jax.core.rewards import reward_weights
from mgrpo_jax.data.corpus import LocalCorpus
from mgrpo_jax.data.loading import load_tasks
from mgrpo_jax.data.task import Task
from mgrpo_jax.data.world import WorldConfig
from mgrpo_jax.training import batches
from mgrpo_jax.training import store as store_lib
from mgrpo_jax.training.diagnostics import Grader, team_diagnostics
from mgrpo_jax.training.learner import Learner, LearnerConfig


def check_config(config: ml_collections.ConfigDict, role: str) -> None:
  """Config errors that can be found before any compute (run_checks.py)."""
  from mgrpo_jax.training.run_checks import check_run_config
  check_run_config(config, role)


def learner_config(config, agent: str) -> LearnerConfig:
  return LearnerConfig(**config.learner[agent].to_dict())


def pack_settings(config, agent: str) -> batches.PackSettings:
  c = learner_config(config, agent)
  return batches.PackSettings(c.micro_batch, c.min_len, c.max_len)


@dataclasses.dataclass
class Data:
  """The train questions (shuffled per epoch), validation, the corpus, and
  the held-out test questions (train.test_questions; never used for a
  choice: only logged)."""
  train: list[Task]
  validation: list[Task]
  backend: LocalCorpus
  seed: int
  test: list[Task] = dataclasses.field(default_factory=list)

  def batch(self, step: int, size: int) -> list[Task]:
    """Questions of `step`: a fixed permutation per epoch, so a resumed run
    sees exactly the questions an uninterrupted one would."""
    n = len(self.train)
    out = []
    for i in range(step * size, (step + 1) * size):
      epoch, pos = divmod(i, n)
      order = np.random.default_rng([self.seed, epoch]).permutation(n)
      out.append(self.train[order[pos]])
    return out


def load_data(config) -> Data:
  world = WorldConfig(**config.world.to_dict())
  train = load_tasks("synthetic", split="train", world=world)
  validation = load_tasks("synthetic", split="validation", world=world,
                          limit=config.train.eval_questions)
  test = (load_tasks("synthetic", split="test", world=world,
                     limit=config.train.test_questions).tasks
          if config.train.test_questions else [])
  return Data(list(train.tasks), list(validation.tasks),
              LocalCorpus(train.documents, source="synthetic world"),
              config.seed, list(test))


def greedy(controller: RolloutController) -> RolloutController:
  """The same team on the same samplers, decoding greedily (evaluation)."""
  agents = [dataclasses.replace(a, sampling=dataclasses.replace(
      a.sampling, temperature=0.0)) for a in controller.agents.values()]
  return RolloutController(agents[0], agents[1:])


def agents_section(config) -> ml_collections.ConfigDict:
  agents = ml_collections.ConfigDict(config.agents.to_dict())
  agents.mode = "single" if config.mode == "single" else "multi"
  return agents


def rollout_step(controller, tasks, group_size, key, weights):
  """Rolls out, scores; returns (rollouts, scores, metrics)."""
  start = time.perf_counter()
  rollouts = controller.run(tasks, group_size, key)
  seconds = time.perf_counter() - start
  expert = RuleExpert() if weights["v_exp"] > 0 else None
  sub_name = "sub"
  scores = score_rollouts(rollouts, tasks, weights, expert=expert,
                          sub_agent=sub_name)
  generated = sum(t.num_generated for row in rollouts for r in row
                  for t in [r.main, *r.subs])
  metrics = {
      "main/reward": float(scores.main_reward.mean()),
      "main/accuracy": float(scores.main_correct.mean()),
      "main/format": float(scores.main_format_ok.mean()),
      "sub/calls_per_rollout": float(scores.sub_calls.mean()),
      "rollout/generated_tokens": float(generated),
      "time/rollout": seconds,
      "rollout/tokens_per_second": generated / seconds,
  }
  if len(scores.sub_reward):
    metrics["sub/reward"] = float(scores.sub_reward.mean())
    metrics["sub/format"] = float(scores.sub_format_ok.mean())
  return rollouts, scores, metrics


def evaluate(controller, tasks, samples: int = 0, *,
             grader: Grader | None = None,
             prefix: str = "eval") -> dict[str, float]:
  """Validation figures: one greedy rollout per question (eval/accuracy,
  format, sub_calls; with a `grader`, the per-agent diagnostics of
  training/diagnostics.py on those rollouts) and, with `samples` > 0, that
  many rollouts per question at the training temperature
  (eval/sampled_accuracy, eval/sampled_format: the expected reward terms
  the policy gradient climbs). The sampling key is the same at every
  evaluation, so two evaluations differ only through the weights. `prefix`
  names the split's figures ("eval", "test")."""
  start = time.perf_counter()

  def scored(rollouts):  # Means of (correct, well-formed, sub calls).
    return np.array([(is_correct(r.main.answer, t), r.main.format_ok,
                      len(r.subs)) for row, t in zip(rollouts, tasks)
                     for r in row], np.float64).mean(axis=0)

  rollouts = greedy(controller).run(tasks, 1, jax.random.key(0))
  accuracy, fmt, calls = scored(rollouts)
  out = {"accuracy": float(accuracy), "format": float(fmt),
         "sub_calls": float(calls)}
  if grader is not None:
    out.update(team_diagnostics(rollouts, tasks, grader))
  if samples:
    accuracy, fmt, _ = scored(
        controller.run(tasks, samples, jax.random.key(1)))
    out["sampled_accuracy"] = float(accuracy)
    out["sampled_format"] = float(fmt)
  out = prefixed(prefix, out)
  out[f"time/{prefix}"] = time.perf_counter() - start
  return out


def prefixed(prefix: str, metrics: dict[str, float]) -> dict[str, float]:
  return {f"{prefix}/{k}": v for k, v in metrics.items()}


OnLog = Callable[[int, dict[str, float]], None]


# ------------------------------------------------------------------ models


def build_models(config, meshes, data: Data, *, need_sub: bool,
                 need_main: bool = True, log: Callable[[str], None] = print):
  """(tokenizer, main model or None, sub model or None, SFT figures). The
  tiny model is warm-started once for the whole team (training/
  warm_start.py, cached on disk) and each agent gets its own copy on its
  own mesh (no SFT with sft.steps 0). A resumed run builds the warm start
  too: it is the frozen sub-agent and the KL reference."""
  from mgrpo_jax.models import build
  from mgrpo_jax.models.loading import load_model
  if config.model.name != "tiny":
    tok, main, sub = None, None, None
    if need_main:
      main, tok = load_model(config.model.name, mesh=meshes["main"])
    if need_sub:
      sub, tok = load_model(config.model.name, mesh=meshes["sub"])
    return tok, main, sub, {}
  from mgrpo_jax.data.task import TaskSet
  from mgrpo_jax.training import tiny
  from mgrpo_jax.training.warm_start import warm_started
  world = WorldConfig(**config.world.to_dict())
  tok, model_config = tiny.tiny_team_assets(
      world, vocab_size=config.model.vocab_size,
      hidden_size=config.model.hidden_size,
      num_layers=config.model.num_layers,
      max_position_embeddings=max(config.agents.main.context_tokens,
                                  config.agents.sub.context_tokens))
  if config.sft.steps == 0:
    main = (build.init_model(model_config, seed=config.seed,
                             mesh=meshes["main"]) if need_main else None)
    sub = (build.init_model(model_config, seed=config.seed + 1,
                            mesh=meshes["sub"]) if need_sub else None)
    return tok, main, sub, {}
  taskset = TaskSet("sft", data.train[:config.sft.questions],
                    data.backend.documents)
  directory, figures = warm_started(config, taskset, tok, model_config,
                                    agents_section(config), log=log)
  main = load_model(directory, mesh=meshes["main"])[0] if need_main else None
  sub = load_model(directory, mesh=meshes["sub"])[0] if need_sub else None
  return tok, main, sub, figures


# -------------------------------------------------------------------- run


def checksum(params: Any) -> float:
  """Sum of |w| over every weight, in float64 on the host: the same weights
  give the same number in any process."""
  return float(sum(np.abs(np.asarray(x, np.float64)).sum()
                   for x in jax.tree.leaves(params)))


def absolute(path: str) -> str:
  """Orbax wants absolute paths; gs:// URLs are left alone."""
  import os
  return path if "://" in path else os.path.abspath(path)


def fingerprint(config) -> dict[str, Any]:
  """What both sides of a run must agree on (checked when the store opens)."""
  return {"mode": config.mode, "model": config.model.to_dict(),
          "world": config.world.to_dict(),
          "questions_per_step": config.train.questions_per_step,
          "group_size": config.train.group_size, "d_max": config.align.d_max,
          "seed": config.seed}


class _Side:
  """What one process of a run holds (see `run`)."""

  def __init__(self, config, role: str, log: Callable[[str], None]):
    from mgrpo_jax.training import checkpoints, meshes
    check_config(config, role)
    self.config, self.role, self.log = config, role, log
    self.trains_main = role in ("all", "main")
    self.trains_sub = role in ("all", "sub") and config.mode == "mgrpo"
    self.samples = role in ("all", "main")
    # The main side samples both agents; the sub side only trains its own.
    need_sub = config.mode != "single"
    mesh_names = (["sub"] if role == "sub" else
                  ["main", "sub"] if need_sub else ["main"])
    mesh_config = ml_collections.ConfigDict(
        {k: config.mesh[k] for k in ["share", *mesh_names]})
    self.meshes = meshes.agent_meshes(mesh_config)
    run_dir = absolute(config.run_dir)
    # Every weight version is kept until a checkpoint makes it unneeded
    # (`prune_weights` after each save).
    self.store = store_lib.open_store(absolute(config.store.root)
                                      if config.store.root
                                      else f"{run_dir}/store",
                                      fingerprint=fingerprint(config),
                                      keep_weights=None)
    self.data = load_data(config)
    self.ckpt = {}
    for name, trains in (("main", self.trains_main), ("sub", self.trains_sub)):
      if trains:
        self.ckpt[name] = checkpoints.AgentCheckpointer(
            f"{run_dir}/checkpoints", name,
            max_to_keep=config.checkpoint.max_to_keep,
            save_every=config.checkpoint.every)
    self.resume_step = self._common_step()
    self.tok, main_model, sub_model, self.sft_metrics = build_models(
        config, self.meshes, self.data, need_sub=need_sub,
        need_main=role != "sub", log=log)
    if self.ckpt:  # Lets evaluate --checkpoint rebuild the trained model.
      from mgrpo_jax.training.trained import write_model_card
      write_model_card(f"{run_dir}/checkpoints",
                       (main_model or sub_model).config, self.tok)
    from flax import nnx
    self.sub_target = (nnx.split(sub_model)[1] if sub_model is not None
                       else None)
    # Each learner scores tokens at the rollouts' temperature.
    temperature = config.agents.temperature
    self.main = (Learner("main", main_model, learner_config(config, "main"),
                         self.meshes["main"], temperature=temperature)
                 if self.trains_main else None)
    self.sub = (Learner("sub", sub_model, learner_config(config, "sub"),
                        self.meshes["sub"], temperature=temperature)
                if self.trains_sub else None)
    self.controller = None
    self.sub_weights = None  # (step, checksum) of the sub weights sampled with.
    if self.samples:
      self.controller = build_team(
          agents_section(config), self.data.backend, main_model=main_model,
          main_tokenizer=self.tok, sub_model=sub_model)
    self.weights = reward_weights(config.reward.preset, **{
        k: v for k, v in config.reward.to_dict().items()
        if k != "preset" and v is not None})
    self.start_step = self._resume()

  def _common_step(self) -> int | None:
    """The newest step every agent this process trains has a checkpoint of
    (None: start afresh). A run killed between the agents' saves left one
    agent a step ahead: that newer checkpoint is dropped and the step is
    redone (same seed, same result)."""
    if not self.ckpt:
      return None
    saved = {name: set(c.steps()) for name, c in self.ckpt.items()}
    common = set.intersection(*saved.values())
    step = max(common) if common else None
    for name, ckpt in self.ckpt.items():
      dropped = ckpt.discard_after(step)
      if dropped:
        self.log(f"{name}: dropped the checkpoint(s) of step(s) {dropped}, "
                 f"newer than the newest step all agents saved ({step}); "
                 "they are redone")
    return step

  def _resume(self) -> int:
    if self.resume_step is None:
      return 0
    for name, learner in (("main", self.main), ("sub", self.sub)):
      if learner is None:
        continue
      restored = self.ckpt[name].restore(self.resume_step, learner.params,
                                         learner.opt_state)
      learner.params, learner.opt_state = restored.params, restored.opt_state
      learner.step_count = restored.step
      self.log(f"{name}: resumed from the checkpoint of step {restored.step}")
    return self.resume_step

  # ------------------------------------------------------------- weights

  def sync_main(self) -> None:
    """The main sampler takes the main learner's weights (version = its
    update count)."""
    self.controller.agents["main" if self.config.mode != "single"
                           else "single"].policy.update_weights(
                               self.main.params, version=self.main.step_count)

  def sync_sub(self, step: int, *, newest: bool = False) -> None:
    """Loads the sub weights the rollout of `step` must use (one version
    behind with one_step), or with `newest` those after `step` updates (what
    evaluation uses)."""
    if self.config.mode != "mgrpo":
      return
    want = (step if newest or self.config.train.staleness == "sync"
            else max(step - 1, 0))
    if self.sub_weights is not None and self.sub_weights[0] == want:
      return
    engine = self.controller.agents["sub"].policy
    if self.sub is not None and want == self.sub.step_count:
      params = self.sub.params
    else:
      params = self.store.load_weights(
          "sub", self._wait_weights(want), target=self.sub_target)
    engine.update_weights(params, version=want)
    self.sub_weights = (want, checksum(params))

  def _wait_weights(self, want: int) -> int:
    timeout = self.config.store.timeout_s
    start = time.perf_counter()
    next_status = start  # A status line as soon as it waits, then every 5 s.
    while True:
      latest = self.store.latest_weights_step("sub")
      if latest is not None and latest >= want:
        return want
      waited = time.perf_counter() - start
      if waited > timeout:
        raise store_lib.StoreTimeout(
            f"waited {waited:.0f} s for the sub side's weights of step "
            f"{want} in {self.store.root} (latest published: {latest}); is "
            "the --role=sub process running? Raise config.store.timeout_s "
            f"(now {timeout}) if it is just slow. Everything up to the last "
            "finished step is saved; start this process again to resume.")
      if time.perf_counter() >= next_status:
        next_status += 5.0
        self.log(f"waiting for the sub side's weights of step {want} "
                 f"({waited:.0f} s of {timeout:.0f} s)")
      time.sleep(0.5)

  # ---------------------------------------------------------------- steps

  def main_step(self, step: int, key) -> dict[str, float]:
    """Rollouts, rewards, the store record, the main update."""
    config = self.config
    c = config.train
    metrics: dict[str, float] = {}
    start = time.perf_counter()
    self.sync_sub(step)
    metrics["time/weights"] = time.perf_counter() - start
    tasks = self.data.batch(step, c.questions_per_step)
    rollouts, scores, rollout_metrics = rollout_step(
        self.controller, tasks, c.group_size, jax.random.fold_in(key, 0),
        self.weights)
    metrics.update(rollout_metrics)
    if self.sub_weights is not None:
      metrics["weights/sub_step"], metrics["weights/sub_checksum"] = (
          self.sub_weights)
    if config.mode != "single":
      start = time.perf_counter()
      record = batches.sub_record(rollouts, scores)
      if self.store.has_step(step):  # Written before a crash: keep it.
        self.log(f"step {step}: the store already holds this step's record "
                 "(a resumed run); the sub side trains on that one")
      else:
        self.store.write_step(step, record.to_arrays(), {
            "main/reward": metrics["main/reward"],
            "main/accuracy": metrics["main/accuracy"]})
      metrics["time/store"] = time.perf_counter() - start
    start = time.perf_counter()
    batch, _ = batches.main_batch(
        rollouts, scores, settings=pack_settings(config, "main"),
        scale=config.advantage.scale, eps=config.advantage.eps)
    metrics.update(prefixed("main", self.main.step(batch)))
    self.sync_main()
    metrics["time/main_update"] = time.perf_counter() - start
    return metrics

  def sub_step(self, step: int, key) -> dict[str, float]:
    """Reads the step from the store, aligns, updates, publishes."""
    config = self.config
    start = time.perf_counter()
    arrays, _ = self.store.read_step(
        step, timeout_s=config.store.timeout_s,
        status=lambda message: self.log(message))
    record = batches.SubRecord.from_arrays(arrays)
    batch, stats = batches.sub_batch(
        record, jax.random.fold_in(key, 1), d_max=config.align.d_max,
        settings=pack_settings(config, "sub"), fill=config.align.fill,
        group_by=config.advantage.sub_group_by,
        scale=config.advantage.scale, eps=config.advantage.eps)
    metrics = prefixed("sub", self.sub.step(batch))
    metrics.update(prefixed("align", stats))
    self.publish_sub(step + 1)
    metrics["weights/published_checksum"] = checksum(self.sub.params)
    metrics["time/sub_update"] = time.perf_counter() - start
    return metrics

  def evaluate(self, step: int) -> dict[str, float]:
    """Validation with the newest weights of every agent (after `step`
    updates; the main sampler already has them)."""
    self.sync_sub(step, newest=True)
    grader = Grader(self.data.backend.documents)
    out = evaluate(self.controller, self.data.validation,
                   self.config.train.eval_samples, grader=grader)
    if self.data.test:
      out.update(evaluate(self.controller, self.data.test, grader=grader,
                          prefix="test"))
    if self.sub_weights is not None:
      out["eval/sub_version"] = float(self.sub_weights[0])
    return out

  def publish_sub(self, step: int) -> None:
    """Publishes the sub weights after `step` updates (once per step)."""
    latest = self.store.latest_weights_step("sub")
    if latest is None or latest < step:
      self.store.publish_weights("sub", step, self.sub.params)

  def save(self, step: int, key, *, force: bool = False) -> None:
    for name, learner in (("main", self.main), ("sub", self.sub)):
      if learner is not None:
        self.ckpt[name].save(step, learner.params, learner.opt_state,
                             key=key, data_position=step, force=force)
    if self.sub is not None:
      self.prune_weights()

  def prune_weights(self) -> None:
    """Drops sub weight versions no resume can need: a resume starts at a
    kept checkpoint step s (either side's, which stay within a step of each
    other) and samples version s, or s - 1 with one_step."""
    kept = self.ckpt["sub"].steps()
    if kept:
      self.store.prune_weights("sub", keep_from=min(kept) - 1,
                               keep_newest=self.config.store.keep_weights)

  def close(self) -> None:
    for ckpt in self.ckpt.values():
      ckpt.close()


def run(config: ml_collections.ConfigDict, *, role: str = "all",
        on_log: OnLog | None = None,
        log: Callable[[str], None] = print) -> dict[str, float]:
  """Trains for `config.train.steps` steps (resuming from checkpoints);
  returns the last logged metrics."""
  from mgrpo_jax.training.metrics import (MetricsWriter, ProgressBar,
                                          compilations, count_compilations)
  count_compilations()
  side = _Side(config, role, log)
  c = config.train
  key = jax.random.key(config.seed)
  writer = MetricsWriter(f"{absolute(config.run_dir)}/{role}")
  last: dict[str, float] = {}
  if side.start_step == 0 and side.sft_metrics:
    writer.write(0, side.sft_metrics)
  if side.sub is not None:
    side.publish_sub(side.start_step)
  if side.samples:
    side.sync_main()
  bar = ProgressBar(c.steps, side.start_step)
  try:
    if side.samples and side.start_step == 0:
      metrics = side.evaluate(0)
      writer.write(0, metrics)
      last.update(metrics)
      log(f"step 0: {metrics}")
    for step in range(side.start_step, c.steps):
      step_key = jax.random.fold_in(key, step)
      start = time.perf_counter()
      metrics: dict[str, float] = {}
      if side.trains_main:
        metrics.update(side.main_step(step, step_key))
      if side.sub is not None:
        metrics.update(side.sub_step(step, step_key))
      done = step + 1
      if side.samples and (done % c.eval_every == 0 or done == c.steps):
        metrics.update(side.evaluate(done))
      metrics["time/step"] = time.perf_counter() - start
      metrics["jit/compilations"] = float(compilations())
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
