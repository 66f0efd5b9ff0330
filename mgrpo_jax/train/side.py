"""One process of an M-GRPO run (train/trainer.py runs it): its meshes,
store, checkpoints, models, learners and samplers, and the step's parts.

`Side(config, role)` holds what the role needs: "all" both agents, "main"
the rollouts and the main agent, "sub" the sub-agent's learner only (it
reads steps from the store and publishes weights to it).

Two processes (`--role=main` and `--role=sub`, one `--role=<kind>` per
sub-agent kind) share nothing but `config.store.root`. `--role=sub` builds
only the sub-agent's mesh, model and learner; `--role=main` builds the main
learner and both samplers (the main side rolls out the whole team).
Evaluation always uses the newest weights of every agent, so at an
evaluation step the main side waits for the sub side's update of that
step. A side waiting for the other logs a status line every 5 s and gives
up after `config.store.timeout_s` with a message naming the step, the store
and the fix; everything up to the last finished step stays saved, and
starting the process again resumes. tests/roles_test.py starts both roles
and checks that the sub side trains on exactly the main side's steps and
that the main side samples with the very weights the sub side published; it
runs with `bash launch/test_slow.sh`, as does one M-GRPO step of
configs/smollm2.py (the two together took 209 s on an AMD EPYC family 25
model 17, 2026-12-03, before that step had a warm start; neither is in the
default run).
A role may also run as several processes of one JAX distributed system
(`--distributed`, the hosts of a TPU slice): each process rolls out its
shard of the step's questions on its own devices (train/shards.py,
`mesh.<agent>.sampler_devices`), writes its part of the step's store
record, and joins the others in the learners' collectives; the step's
figures, skip decisions and resume step are the same in every process
(runtime/processes.py), and process 0 alone writes metrics, outcomes and
the model card. tests/multihost_test.py (slow) checks that 2 processes x 2
devices sample what 1 process x 4 devices does and train the same weights
to float32 rounding.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import jax
import ml_collections

from mgrpo_jax.agents.diagnostics import Grader
from mgrpo_jax.agents.team import build_team, sub_kinds
from mgrpo_jax.models import sharding
from mgrpo_jax.runtime import checkpoints, meshes, processes
from mgrpo_jax.runtime.checksum import checksum
from mgrpo_jax.runtime import store as store_lib
from mgrpo_jax.train import adapters, batches
from mgrpo_jax.train.data import identity as data_identity
from mgrpo_jax.train.data import load_data
from mgrpo_jax.train import shards as shards_lib
from mgrpo_jax.train.evaluator import evaluate, prefixed, weights_of
from mgrpo_jax.train.learner import Learner, LearnerConfig
from mgrpo_jax.train.outcomes import write_outcomes
from mgrpo_jax.train.run_checks import check_run_config
from mgrpo_jax.train.team_build import agents_section, build_models
from mgrpo_jax.train.reading import reading_of
from mgrpo_jax.train.scripted import scripted_policies
from mgrpo_jax.train.warm_start import check_demonstrations


SUB_TRAINS = ("mgrpo", "frozen_main")  # Modes whose sub-agents learn.


def learner_config(config, agent: str) -> LearnerConfig:
  return LearnerConfig(**config.learner[agent].to_dict())


def pack_settings(config, agent: str) -> batches.PackSettings:
  c = learner_config(config, agent)
  return batches.PackSettings(c.micro_batch, c.min_len, c.max_len)


def absolute(path: str) -> str:
  """Orbax wants absolute paths; gs:// URLs are left alone."""
  return path if "://" in path else os.path.abspath(path)


def fingerprint(config) -> dict[str, Any]:
  """What both sides of a run must agree on (checked when the store opens)."""
  return {"mode": config.mode, "model": config.model.to_dict(),
          "world": config.world.to_dict(), **data_identity(config),
          "questions_per_step": config.train.questions_per_step,
          "group_size": config.train.group_size, "d_max": config.align.d_max,
          "sub_kinds": list(sub_kinds(agents_section(config))),
          "seed": config.seed}


def d_max_of(config, kind: str) -> int:
  """D_max of a sub-agent kind: align.d_max for "sub", align.<kind>_d_max
  for the others."""
  return config.align.d_max if kind == "sub" else config.align[f"{kind}_d_max"]


def _named(kind: str, metric: str) -> str:
  """A sub-agent kind's name of a per-kind metric: the "sub" kind keeps the
  names runs have always logged ("align/valid_slots",
  "weights/published_checksum"); another kind's are "verifier_align/...",
  "weights/verifier_published_checksum"."""
  group, _, name = metric.partition("/")
  if kind == "sub":
    return metric
  return f"{group}/{kind}_{name}" if group == "weights" else f"{kind}_{metric}"


class Side:
  """What one process of a run holds (see the module docstring). Every
  per-agent thing is keyed by the agent's name: "main" and each sub-agent
  kind of `config.agents.sub_kinds`."""

  def __init__(self, config, role: str, log: Callable[[str], None]):
    check_run_config(config, role)
    self.config, self.log, self.role = config, log, role
    self.kinds = sub_kinds(agents_section(config))
    self.samples = role in ("all", "main")
    trains = {"main": self.samples and config.mode != "frozen_main"}
    for kind in self.kinds:
      trains[kind] = config.mode in SUB_TRAINS and role in ("all", kind)
    self.trained = [name for name, t in trains.items() if t]
    # The main side samples every agent; a kind's side only trains its own.
    built = ["main", *self.kinds] if self.samples else [role]
    mesh_config = ml_collections.ConfigDict(
        {k: config.mesh[k] for k in ["share", *built]})
    self.meshes = meshes.agent_meshes(mesh_config)
    # Where this process samples for each agent: its own devices of the
    # agent's mesh (every process rolls out its own questions).
    self.sampler_meshes = ({name: meshes.sampler_mesh(
        self.meshes[name], config.mesh[name].sampler_devices)
                            for name in built} if self.samples else {})
    # Which of the step's questions this process rolls out.
    self.shards = (shards_lib.plan(config, processes.count(),
                                   processes.index())
                   if self.samples else None)
    if processes.count() > 1:  # Every process's own line (a slice's check).
      from mgrpo_jax.runtime import logs
      logs.say(shards_lib.placement(self.role, self.meshes,
                                    self.sampler_meshes, self.shards))
    # Before anything is written: a data file that cannot be read stops the
    # run here, with the store, checkpoints and caches untouched.
    self.data = load_data(config)
    check_demonstrations(config, self.data.train, self.data.documents)
    run_dir = absolute(config.run_dir)
    root = (absolute(config.store.root) if config.store.root
            else f"{run_dir}/store")
    # The processes of a role run one command: the same config and store.
    processes.agree("the config's fingerprint", fingerprint(config))
    processes.agree("the store's root", root)
    # Every weight version is kept until a checkpoint makes it unneeded
    # (`prune_weights` after each save).
    self.store = store_lib.open_store(root, fingerprint=fingerprint(config),
                                      keep_weights=None)
    self.ckpt = {name: checkpoints.AgentCheckpointer(
        f"{run_dir}/checkpoints", name,
        max_to_keep=config.checkpoint.max_to_keep,
        save_every=config.checkpoint.every, keep_steps=(0,))
        for name in self.trained}
    # One resume decision for every process of the role: process 0's.
    self.resume_step = processes.broadcast("resume step", self._common_step())
    self.tok, models, self.sft_metrics = build_models(
        config, self.meshes, self.data, built, log=log, store=self.store)
    models = adapters.share_bases(config, models, self.meshes)
    if self.ckpt and processes.primary():  # Lets evaluate --checkpoint
      # rebuild the trained model.
      from mgrpo_jax.train.trained import write_model_card
      write_model_card(f"{run_dir}/checkpoints",
                       next(iter(models.values())).config, self.tok,
                       {a: adapters.lora_rank(config, a) for a in self.trained
                        if adapters.lora_rank(config, a)})
    # What each sampler loads (with LoRA: its base and the adapters), and
    # what weights loaded from the store are restored into, per agent.
    self.sampler_weights = adapters.SamplerWeights(config, models)
    self.targets = self.sampler_weights.targets
    # Each learner scores tokens at the rollouts' temperature.
    self.learners = {name: Learner(
        name, models[name], learner_config(config, name), self.meshes[name],
        temperature=config.agents.temperature) for name in self.trained}
    self.controller = None
    # Per kind: (step, checksum) of the weights its sampler has.
    self.sub_weights: dict[str, tuple[int, float]] = {}
    if self.samples:
      samplers = {name: self._sampler_model(name, models[name])
                  for name in ["main", *self.kinds]}
      self.controller = build_team(
          agents_section(config), self.data.backend,
          main_model=samplers["main"], main_tokenizer=self.tok,
          sub_models={k: samplers[k] for k in self.kinds},
          policies=scripted_policies(config, self.data, self.tok),
          runtime=config.runtime)
      self.reading = reading_of(config, self.data, self.controller, self.tok)
    self.weights = weights_of(config.reward.to_dict())
    undecomposed = [t for t in self.data.train if not t.sub_questions]
    if self.weights.get("v_exp") and undecomposed:
      log(f"note: the rule expert (reward v_exp={self.weights['v_exp']}) "
          "scores a report against its question's decomposition or final "
          f"answer; {len(undecomposed)} of {len(self.data.train)} train "
          f"questions (e.g. {undecomposed[0].task_id!r}) have no "
          "decomposition, so only reports stating the final answer score")
    self.start_step = self._resume()

  @property
  def main(self) -> Learner | None:
    return self.learners.get("main")

  @property
  def trained_kinds(self) -> list[str]:
    """The sub-agent kinds this process trains."""
    return [k for k in self.kinds if k in self.learners]

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
    for name, learner in self.learners.items():
      restored = self.ckpt[name].restore(self.resume_step, learner.params,
                                         learner.opt_state)
      learner.params, learner.opt_state = restored.params, restored.opt_state
      learner.step_count = restored.step
      self.log(f"{name}: resumed from the checkpoint of step {restored.step}")
    return self.resume_step

  # ------------------------------------------------------------- weights

  def _on_sampler(self, name: str, params: Any) -> Any:
    """`params` of agent `name` on this process's sampler devices (the
    arrays themselves when those are the agent's whole mesh)."""
    mesh = self.sampler_meshes[name]
    if mesh is self.meshes[name]:
      return params
    return sharding.place_state(params, mesh)

  def _sampler_model(self, name: str, model: Any) -> Any:
    from flax import nnx
    if self.sampler_meshes[name] is self.meshes[name]:
      return model
    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, self._on_sampler(name, state))

  def sync_main(self) -> None:
    """The main sampler takes the main learner's weights (version = its
    update count); an untrained planner keeps its start."""
    if self.main is None:
      return
    self.controller.load_weights(
        "main" if self.config.mode != "single" else "single",
        self._on_sampler("main", self.sampler_weights.state(
            "main", self.main.params)), self.main.step_count)

  def sync_subs(self, step: int, *, newest: bool = False) -> None:
    """Loads, for every sub-agent kind, the weights the rollout of `step`
    must use (one version behind with one_step), or with `newest` those
    after `step` updates (what evaluation uses)."""
    if self.config.mode not in SUB_TRAINS:
      return
    want = (step if newest or self.config.train.staleness == "sync"
            else max(step - 1, 0))
    for kind in self.kinds:
      if self.sub_weights.get(kind, (None,))[0] == want:
        continue
      learner = self.learners.get(kind)
      if learner is not None and want == learner.step_count:
        params = learner.params
      else:
        params = self.store.load_weights(
            kind, self._wait_weights(kind, want), target=self.targets[kind])
      self.controller.load_weights(
          kind, self._on_sampler(kind, self.sampler_weights.state(kind,
                                                                  params)),
          want)
      self.sub_weights[kind] = (want, checksum(params))

  def _wait_weights(self, kind: str, want: int) -> int:
    timeout = self.config.store.timeout_s
    start = time.perf_counter()
    next_status = start  # A status line as soon as it waits, then every 5 s.
    while True:
      # Every process polls (Orbax's reader meets the others in a barrier
      # when it opens) and takes process 0's answer, so none goes on while
      # another still waits.
      latest = processes.broadcast(f"{kind} weights published",
                                   self.store.latest_weights_step(kind))
      if latest is not None and latest >= want:
        return want
      waited = time.perf_counter() - start
      if waited > timeout:
        raise store_lib.StoreTimeout(
            f"waited {waited:.0f} s for the {kind} side's weights of step "
            f"{want} in {self.store.root} (latest published: {latest}); is "
            f"the --role={kind} process running? Raise "
            f"config.store.timeout_s (now {timeout}) if it is just slow. "
            "Everything up to the last finished step is saved; start this "
            "process again to resume.")
      if time.perf_counter() >= next_status:
        next_status += 5.0
        self.log(f"waiting for the {kind} side's weights of step {want} "
                 f"({waited:.0f} s of {timeout:.0f} s)")
      time.sleep(0.5)

  # ---------------------------------------------------------------- steps

  def main_step(self, step: int, key) -> dict[str, float]:
    """Rollouts, rewards, the store record, the main update."""
    config = self.config
    c = config.train
    metrics: dict[str, float] = {}
    start = time.perf_counter()
    self.sync_subs(step)
    metrics["time/weights"] = time.perf_counter() - start
    tasks = self.data.batch(step, c.questions_per_step)
    rollouts, scores, step_scores, rollout_metrics = shards_lib.rollout_step(
        self.controller, tasks, c.group_size, jax.random.fold_in(key, 0),
        self.weights, plan=self.shards, novel=self.reading.mask(tasks))
    metrics.update(rollout_metrics)
    if hasattr(self.data.backend, "figures"):  # The web backend's counts.
      metrics.update(self.data.backend.figures())
    for kind, (version, total) in self.sub_weights.items():
      metrics[f"weights/{kind}_step"] = version
      metrics[f"weights/{kind}_checksum"] = total
    if self.kinds:
      start = time.perf_counter()
      mine = [t for s in self.shards.mine for t in self.shards.tasks(tasks, s)]
      arrays = {}
      for kind in self.kinds:
        kind_scores = scores if kind == "sub" else shards_lib.kind_scores(
            rollouts, mine, kind, self.weights, metrics)
        record = batches.sub_record(rollouts, kind_scores, mine)
        arrays.update({f"{kind}.{k}": v
                       for k, v in record.to_arrays().items()})
      self._write_step(step, arrays, metrics)
      metrics["time/store"] = time.perf_counter() - start
    if self.main is None:  # mode frozen_main: the planner does not learn.
      return metrics
    start = time.perf_counter()
    longest = batches.longest_main(rollouts)
    if processes.count() > 1:  # T from the step's longest, on every process.
      longest = max(processes.gather("main longest", longest))
    batch, signal = batches.main_batch(
        rollouts, step_scores, settings=pack_settings(config, "main"),
        scale=config.advantage.scale, eps=config.advantage.eps,
        shards=self.shards, longest=longest)
    metrics.update(prefixed("main", signal))
    metrics["time/main_batch"] = time.perf_counter() - start
    metrics.update(prefixed("main", self.main.step(batch)))
    self.sync_main()
    metrics["time/main_update"] = time.perf_counter() - start
    return metrics

  def _write_step(self, step: int, arrays, metrics) -> None:
    """The step's record: written whole by one process, or one part per
    process, committed by process 0 once every part is written. A step
    (or part) a crashed run wrote is kept: a resumed run redoes the step
    with the same keys, so it holds the same rollouts."""
    meta = {"main/reward": metrics["main/reward"],
            "main/accuracy": metrics["main/accuracy"]}
    kept = processes.broadcast("step written", self.store.has_step(step))
    if kept:
      self.log(f"step {step}: the store already holds this step's record "
               "(a resumed run); the sub-agents train on that one")
      return
    if processes.count() == 1:
      self.store.write_step(step, arrays, meta)
      return
    if not self.store.has_part(step, processes.index()):
      self.store.write_part(step, processes.index(), arrays)
    processes.barrier(f"step {step} parts written")
    if processes.primary():
      self.store.write_step(step, {}, meta, parts=processes.count())

  def sub_step(self, kind: str, step: int, key) -> dict[str, float]:
    """Reads the kind's part of the step from the store, aligns it to its
    own D_max, takes its advantages, updates, publishes."""
    config = self.config
    start = time.perf_counter()
    wait = dict(timeout_s=config.store.timeout_s,
                status=lambda message: self.log(message))
    if processes.primary():  # Process 0 waits; the others read once it has.
      arrays, meta = self.store.read_step(step, **wait)
    processes.barrier(f"step {step} committed",
                      timeout_s=config.store.timeout_s + 60)
    if not processes.primary():
      arrays, meta = self.store.read_step(step, **wait)
    prefix = f"{kind}."
    # A main side over several processes wrote one part each.
    record = batches.SubRecord.concatenate([
        batches.SubRecord.from_arrays(
            {k[len(prefix):]: v for k, v in part.items()
             if k.startswith(prefix)})
        for part in self.store.read_parts(step, meta) or [arrays]])
    metrics = {f"time/{kind}_read": time.perf_counter() - start}
    align_start = time.perf_counter()
    batch, stats = batches.sub_batch(
        record, jax.random.fold_in(key, 1 + self.kinds.index(kind)),
        d_max=d_max_of(config, kind), settings=pack_settings(config, kind),
        fill=config.align.fill, group_by=config.advantage.sub_group_by,
        scale=config.advantage.scale, eps=config.advantage.eps)
    metrics[f"time/{kind}_batch"] = time.perf_counter() - align_start
    learner = self.learners[kind]
    metrics.update(prefixed(kind, learner.step(batch)))
    metrics.update(prefixed(kind, {k: stats.pop(k) for k in (
        "informative_groups", "informative_rows")}))
    metrics.update(prefixed(_named(kind, "align"), stats))
    publish_start = time.perf_counter()
    self.publish(kind, step + 1)
    metrics[f"time/{kind}_publish"] = time.perf_counter() - publish_start
    metrics[_named(kind, "weights/published_checksum")] = checksum(
        learner.params)
    metrics[f"time/{kind}_update"] = time.perf_counter() - start
    return metrics

  def evaluate(self, step: int) -> dict[str, float]:
    """Validation with the newest weights of every agent (after `step`
    updates; the main sampler already has them)."""
    self.sync_subs(step, newest=True)
    grader = Grader(self.data.documents, self.data.train + self.data.validation
                    + self.data.test)
    # Per question: greedy right (1 / 0); sampled: 1 / 0 for each of the
    # train.eval_samples rollouts.
    outcomes: dict[str, dict] = {"validation": {}, "test": {},
                                 "validation_sampled": {}}
    # Each process evaluates its shards of the questions.
    shards = self.shards or shards_lib.ONE
    out = evaluate(self.controller, self.data.validation,
                   self.config.train.eval_samples, grader=grader,
                   weights=self.weights, outcomes=outcomes["validation"],
                   sampled_outcomes=outcomes["validation_sampled"],
                   shards=shards, novelty=self.reading.novelty)
    if self.data.test:
      out.update(evaluate(self.controller, self.data.test, grader=grader,
                          prefix="test", weights=self.weights,
                          outcomes=outcomes["test"], shards=shards,
                          novelty=self.reading.novelty))
    out.update(self.reading.evaluate(self.weights, shards))
    if processes.primary():
      write_outcomes(f"{absolute(self.config.run_dir)}/{self.role}", step,
                     outcomes)
    for kind, (version, _) in self.sub_weights.items():
      out[f"eval/{kind}_version"] = float(version)
    return out

  def publish(self, kind: str, step: int) -> None:
    """Publishes a kind's weights after `step` updates (once per step)."""
    latest = self.store.latest_weights_step(kind)
    if latest is None or latest < step:
      self.store.publish_weights(kind, step, self.learners[kind].params)

  def save(self, step: int, key, *, force: bool = False) -> None:
    for name, learner in self.learners.items():
      self.ckpt[name].save(step, learner.params, learner.opt_state,
                           key=key, data_position=step, force=force)
    for kind in self.trained_kinds:
      self.prune_weights(kind)

  def save_start(self, key) -> None:
    """Checkpoints step 0, the weights training starts from (the warm
    start), once per run: kept beside the newest checkpoints so that
    `evaluate --checkpoint <run>/checkpoints/main/0` can measure it after
    the run."""
    for name, learner in self.learners.items():
      if self.ckpt[name].latest_step() is None:
        self.ckpt[name].save(0, learner.params, learner.opt_state, key=key,
                             data_position=0, force=True)

  def prune_weights(self, kind: str) -> None:
    """Drops a kind's weight versions no resume can need: a resume starts at
    a kept checkpoint step s (either side's, which stay within a step of
    each other) and samples version s, or s - 1 with one_step."""
    # Step 0 (the warm start, always kept) is resumed from only while it
    # is the one checkpoint; the weights it needs are published afresh.
    kept = [s for s in self.ckpt[kind].steps() if s > 0]
    if kept:
      self.store.prune_weights(kind, keep_from=min(kept) - 1,
                               keep_newest=self.config.store.keep_weights)

  def close(self) -> None:
    for ckpt in self.ckpt.values():
      ckpt.close()
