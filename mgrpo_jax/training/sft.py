"""Supervised warm start: next-token cross-entropy on agent demonstrations.

Before RL, a model (the tiny from-scratch one above all) must already speak
the protocol, or every rollout is a format failure and every reward 0. SFT
trains it on trajectories (e.g. `training.oracle.demonstrations`): the same
token ids and loss masks the rollout controller produces, so it learns
exactly the turns an agent writes, never the prompts or tool outputs.

A step packs B trajectories with the learner's `pack` (T padded to a
bucket of 1, 1.5, 2, 3, 4, ... x min_len, compiled once each), then minimises the
token mean of the masked cross-entropy over the whole batch (micro-batches
of `micro_batch` rows are accumulated inside one jitted step with
`lax.scan`, each divided by the batch's token count), with the learner's
optimizer (`make_optimizer`: global-norm clipping, AdamW, warm-up + cosine).

The tiny team's warm start, measured (`warm_start_tiny_team`):

  python -m mgrpo_jax.training.sft [--steps=300 --eval_every=50
      --entities=300 --train_questions=1000 --max_hops=4
      --json=runs/tiny_warm_start.json --save_dir=DIR]

trains a fresh tiny model (training/tiny.py) on oracle demonstrations of
the world's train split (both agents' trajectories) and, every
`eval_every` steps, rolls out train and test questions greedily through the
real sampler and controller: format (main agent), accuracy, sub-agent
format and reports stating a gold step answer, with seconds spent.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from typing import Any, Callable, Sequence

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mgrpo_jax.agents.rewards import RuleExpert, score_rollouts
from mgrpo_jax.agents.team import build_team
from mgrpo_jax.agents.trajectory import Rollout, Trajectory
from mgrpo_jax.core.rewards import reward_weights
from mgrpo_jax.data.corpus import LocalCorpus
from mgrpo_jax.data.task import TaskSet
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.models.build import init_model
from mgrpo_jax.models.hf_checkpoint import save_hf_checkpoint
from mgrpo_jax.models.tokenizer import Tokenizer
from mgrpo_jax.training.learner import (Batch, LearnerConfig, make_optimizer,
                                        pack)
from mgrpo_jax.training.oracle import demonstrations
from mgrpo_jax.training.tiny import tiny_agents_config, tiny_team_assets


def masked_nll(logits_BxTxV: jax.Array, targets_BxT: jax.Array,
               mask_BxT: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(sum of -log p(target) over the mask, masked argmax hits)."""
  logp_BxTxV = jax.nn.log_softmax(logits_BxTxV.astype(jnp.float32), axis=-1)
  nll_BxT = -jnp.take_along_axis(logp_BxTxV, targets_BxT[..., None],
                                 axis=-1)[..., 0]
  hits_BxT = jnp.argmax(logits_BxTxV, axis=-1) == targets_BxT
  return jnp.sum(nll_BxT * mask_BxT), jnp.sum(hits_BxT * mask_BxT)


def sft_step(graphdef: nnx.GraphDef, optimizer: optax.GradientTransformation,
             micro_batch: int, params: nnx.State, opt_state: optax.OptState,
             inputs_NxT: jax.Array, targets_NxT: jax.Array,
             mask_NxT: jax.Array) -> tuple[nnx.State, optax.OptState,
                                           dict[str, jax.Array]]:
  """One update: masked token-mean cross-entropy over the N rows (N a
  multiple of `micro_batch`), gradients accumulated over micro-batches."""
  n, t = inputs_NxT.shape
  count = jnp.maximum(jnp.sum(mask_NxT), 1.0)
  split = lambda x: x.reshape(n // micro_batch, micro_batch, t)

  def micro(carry, xs):
    grads, hits = carry
    inputs, targets, mask = xs

    def loss_fn(p):
      logits = nnx.merge(graphdef, p)(inputs)
      total, correct = masked_nll(logits, targets, mask)
      return total / count, correct

    (value, correct), g = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return (jax.tree.map(jnp.add, grads, g), hits + correct), value

  zeros = jax.tree.map(jnp.zeros_like, params)
  (grads, hits), values = jax.lax.scan(
      micro, (zeros, jnp.float32(0)),
      (split(inputs_NxT), split(targets_NxT), split(mask_NxT)))
  updates, opt_state = optimizer.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  metrics = {"loss": jnp.sum(values), "accuracy": hits / count,
             "grad_norm": optax.tree.norm(grads), "tokens": jnp.sum(mask_NxT)}
  return params, opt_state, metrics


class SFTTrainer:
  """A model's parameters, optimizer state and jitted SFT step.

  Of `config` (a `LearnerConfig`) SFT reads the optimizer fields
  (learning_rate, warmup_steps, total_steps, weight_decay, clip_norm, b1,
  b2) and the packing fields (micro_batch, min_len, max_len); the RL loss
  fields are ignored.
  """

  def __init__(self, model: nnx.Module, config: LearnerConfig,
               mesh: Mesh | None = None):
    self.config, self.mesh = config, mesh
    self.graphdef, self.params = nnx.split(model)
    self.optimizer = make_optimizer(config)
    self.opt_state = jax.jit(self.optimizer.init)(self.params)
    self.step_count = 0
    self.traces = 0  # Compilations of the step (one per T bucket).

    def step(*args):
      self.traces += 1
      return sft_step(self.graphdef, self.optimizer, config.micro_batch, *args)

    self._step = jax.jit(step, donate_argnums=(0, 1))

  def batch(self, trajectories: Sequence[Trajectory]) -> Batch:
    """The trajectories packed (advantage 1, unused by SFT)."""
    c = self.config
    return pack([t.tokens for t in trajectories],
                [t.loss_mask for t in trajectories],
                [1.0] * len(trajectories), micro_batch=c.micro_batch,
                min_len=c.min_len, max_len=c.max_len)

  def _put(self, x: np.ndarray) -> jax.Array:
    if self.mesh is None:
      return jnp.asarray(x)
    return jax.device_put(x, NamedSharding(self.mesh, PartitionSpec()))

  def step(self, batch: Batch | Sequence[Trajectory]) -> dict[str, float]:
    """One update on a packed batch (or on trajectories, packed here);
    returns loss (mean nats per trained token), accuracy (argmax hits per
    trained token), grad_norm and tokens."""
    if not isinstance(batch, Batch):
      batch = self.batch(batch)
    self.params, self.opt_state, metrics = self._step(
        self.params, self.opt_state, self._put(batch.inputs_NxT),
        self._put(batch.targets_NxT), self._put(batch.mask_NxT))
    self.step_count += 1
    return {k: float(v) for k, v in metrics.items()}

  def model(self) -> nnx.Module:
    """The current weights as a model (e.g. for `Engine.update_weights`)."""
    return nnx.merge(self.graphdef, self.params)


def batches(num_items: int, batch_size: int, steps: int,
            rng: np.random.Generator):
  """Index lists of `batch_size` for `steps` steps: epochs of shuffled
  indices (each item once per epoch; an epoch's tail joins the next)."""
  order: list[int] = []
  for _ in range(steps):
    while len(order) < batch_size:
      order.extend(rng.permutation(num_items).tolist())
    yield order[:batch_size]
    order = order[batch_size:]


def warm_start(model: nnx.Module, trajectories: Sequence[Trajectory], *,
               steps: int, batch_size: int, seed: int = 0,
               learning_rate: float = 1e-3,
               config: LearnerConfig | None = None, mesh: Mesh | None = None,
               on_step: Callable[[int, dict[str, float]], Any] | None = None
               ) -> tuple[nnx.Module, list[float]]:
  """SFT of `model` on `trajectories`; returns the trained model and the
  loss of every step.

  Args:
    model: the decoder to train (its weights are not modified in place).
    trajectories: demonstrations; those with nothing to learn (empty loss
      mask) are skipped.
    steps: optimizer updates.
    batch_size: trajectories per update (also the micro-batch unless
      `config` says otherwise).
    seed: seeds the order of the trajectories.
    learning_rate: peak learning rate (replaces `config`'s).
    config: optimizer / packing settings (default: a warm-up of
      min(10, steps // 10) steps, cosine decay over `steps`, micro-batch
      `batch_size`, T buckets from 64 to the model's context length).
    mesh: where the batch goes (replicated); parameters stay where they are.
    on_step: called as on_step(step, metrics) after every update.
  """
  for field, value in (("steps", steps), ("batch_size", batch_size)):
    if not isinstance(value, int) or value < 1:
      raise ValueError(f"warm_start: {field}={value!r}; expected a positive "
                       "integer.")
  usable = [t for t in trajectories if t.loss_mask[1:].any()]
  if not usable:
    raise ValueError(f"warm_start: none of the {len(trajectories)} "
                     "trajectories has a generated token to learn; expected "
                     "demonstrations with a non-empty loss mask.")
  if config is None:
    config = LearnerConfig(
        learning_rate=learning_rate, warmup_steps=min(10, steps // 10),
        total_steps=steps, micro_batch=batch_size, min_len=64,
        max_len=model.config.max_position_embeddings)
  else:
    config = dataclasses.replace(config, learning_rate=learning_rate,
                                 total_steps=steps)
  trainer = SFTTrainer(model, config, mesh)
  rng = np.random.default_rng(seed)
  losses = []
  for step, index in enumerate(batches(len(usable), batch_size, steps, rng)):
    metrics = trainer.step([usable[i] for i in index])
    losses.append(metrics["loss"])
    if on_step is not None:
      on_step(step, metrics)
  return trainer.model(), losses


# ------------------------------------------ the tiny team, measured


def greedy_eval(model: Any, tokenizer: Tokenizer, taskset: TaskSet,
                agents: ml_collections.ConfigDict, *, seed: int = 0
                ) -> tuple[list[list[Rollout]], dict[str, float]]:
  """Rolls out every task once with the real sampler (`build_team`, one
  model for every agent) and returns (rollouts [B][1], figures): format
  (main), accuracy, sub_format, sub_expert (reports stating a gold step
  answer), sub_calls, seconds."""
  start = time.perf_counter()
  controller = build_team(agents, LocalCorpus(taskset.documents),
                          main_model=model, main_tokenizer=tokenizer)
  tasks = list(taskset.tasks)
  rollouts = controller.run(tasks, 1, jax.random.key(seed))
  scores = score_rollouts(rollouts, tasks, reward_weights("mgrpo"),
                          expert=RuleExpert())
  figures = {
      "format": float(scores.main_format_ok.mean()),
      "accuracy": float(scores.main_correct.mean()),
      "sub_format": (float(scores.sub_format_ok.mean())
                     if scores.sub_format_ok.size else 0.0),
      "sub_expert": (float(scores.sub_expert.mean())
                     if scores.sub_expert.size else 0.0),
      "sub_calls": float(scores.sub_calls.mean()),
      "seconds": time.perf_counter() - start,
  }
  return rollouts, figures


def warm_start_tiny_team(world_config: WorldConfig, *, steps: int = 300,
                         batch_size: int = 8, learning_rate: float = 3e-3,
                         noise: float = 0.0, early_answer: float = 0.0,
                         lazy_report: float = 0.0,
                         seed: int = 0, eval_every: int = 50,
                         eval_questions: int = 16,
                         vocab_size: int = 2048,
                         cache_dir: str | os.PathLike | None = None,
                         agents: ml_collections.ConfigDict | None = None,
                         save_dir: str | os.PathLike | None = None,
                         **model_overrides) -> dict[str, Any]:
  """SFT of a fresh tiny model on oracle demonstrations of the world's
  train split, with greedy rollouts (train and test questions) every
  `eval_every` steps; returns the measurements (losses, seconds, figures,
  the first question's transcript per evaluation). With `save_dir`, the
  trained model and its tokenizer are saved there as a Hugging Face
  checkpoint (`models.load_model` reads it)."""
  agents = agents or tiny_agents_config()
  tokenizer, config = tiny_team_assets(
      world_config, cache_dir=cache_dir, vocab_size=vocab_size,
      max_position_embeddings=agents.main.context_tokens, **model_overrides)
  world = generate_world(world_config)
  train = world.task_set("train")
  demos = demonstrations(train, tokenizer, noise=noise,
                         early_answer=early_answer, lazy_report=lazy_report,
                         seed=seed, agents=agents)
  evals = {split: TaskSet(f"{split}[:{eval_questions}]",
                          world.splits[split][:eval_questions],
                          world.documents) for split in ("train", "test")}
  model = init_model(config, seed=seed)
  trainer = SFTTrainer(model, LearnerConfig(
      learning_rate=learning_rate, warmup_steps=min(10, steps // 10),
      total_steps=steps, micro_batch=min(batch_size, 4), min_len=64,
      max_len=agents.main.context_tokens))
  out: dict[str, Any] = {
      "model_params": config.num_params, "vocab_size": tokenizer.vocab_size,
      "demonstrations": len(demos),
      "demo_tokens": int(sum(len(d.tokens) for d in demos)),
      "losses": [], "accuracy": [], "evals": [], "sft_seconds": 0.0}
  rng = np.random.default_rng(seed)
  for step, index in enumerate(batches(len(demos), batch_size, steps, rng)):
    start = time.perf_counter()
    metrics = trainer.step([demos[i] for i in index])
    out["sft_seconds"] += time.perf_counter() - start
    out["losses"].append(metrics["loss"])
    out["accuracy"].append(metrics["accuracy"])
    if (step + 1) % eval_every == 0 or step + 1 == steps:
      record = {"step": step + 1, "loss": metrics["loss"],
                "sft_seconds": out["sft_seconds"]}
      for split, taskset in evals.items():
        rollouts, figures = greedy_eval(trainer.model(), tokenizer, taskset,
                                        agents, seed=seed)
        record[split] = figures
        record[f"{split}_transcript"] = rollouts[0][0].to_json()
      out["evals"].append(record)
      logging.info("step %d: %s", step + 1,
                   {k: v for k, v in record.items() if "transcript" not in k})
  if save_dir is not None:
    save_hf_checkpoint(trainer.model(), tokenizer, save_dir)
  return out


def _define_flags() -> dict[str, Any]:
  from absl import flags  # pylint: disable=g-import-not-at-top
  return dict(
      steps=flags.DEFINE_integer("steps", 300, "SFT steps."),
      batch_size=flags.DEFINE_integer("batch_size", 8,
                                      "Trajectories per step."),
      learning_rate=flags.DEFINE_float("learning_rate", 3e-3,
                                       "Peak learning rate."),
      noise=flags.DEFINE_float("noise", 0.0, "Oracle mistakes per turn."),
      early_answer=flags.DEFINE_float(
          "early_answer", 0.0, "Share of multi-hop demonstrations answered "
          "after the first hop."),
      lazy_report=flags.DEFINE_float(
          "lazy_report", 0.0, "Share of hops demonstrated without the "
          "visit (reported from the search snippet)."),
      seed=flags.DEFINE_integer("seed", 0, "World, model and data seed."),
      eval_every=flags.DEFINE_integer("eval_every", 50,
                                      "Steps between greedy evaluations."),
      eval_questions=flags.DEFINE_integer("eval_questions", 16,
                                          "Questions per evaluated split."),
      entities=flags.DEFINE_integer("entities", 300, "World entities."),
      train_questions=flags.DEFINE_integer("train_questions", 1000,
                                           "Demonstrated train questions."),
      max_hops=flags.DEFINE_integer("max_hops", 4,
                                    "Most hops a question needs."),
      hidden_size=flags.DEFINE_integer("hidden_size", 128, "Model width D."),
      num_layers=flags.DEFINE_integer("num_layers", 2, "Layers L."),
      json=flags.DEFINE_string("json", "runs/tiny_warm_start.json",
                               "Where the measurements are written."),
      save_dir=flags.DEFINE_string("save_dir", None, "Where the trained "
                                   "model is saved (HF checkpoint); none if "
                                   "unset."))


def main(f: dict[str, Any]) -> None:
  """Warm-starts the tiny team as the flags say; writes the measurements
  as JSON and prints one line per evaluation."""
  world = WorldConfig(num_entities=f["entities"].value,
                      train_questions=f["train_questions"].value,
                      validation_questions=16, test_questions=64,
                      max_hops=f["max_hops"].value, seed=f["seed"].value)
  out = warm_start_tiny_team(
      world, steps=f["steps"].value, batch_size=f["batch_size"].value,
      learning_rate=f["learning_rate"].value, noise=f["noise"].value,
      early_answer=f["early_answer"].value,
      lazy_report=f["lazy_report"].value,
      seed=f["seed"].value, eval_every=f["eval_every"].value,
      eval_questions=f["eval_questions"].value,
      hidden_size=f["hidden_size"].value, num_layers=f["num_layers"].value,
      save_dir=f["save_dir"].value)
  path = pathlib.Path(f["json"].value)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(out, indent=1) + "\n")
  for r in out["evals"]:
    print(f"step {r['step']:>5}  loss {r['loss']:.3f}  sft "
          f"{r['sft_seconds']:.0f} s  " + "  ".join(
              f"{s}: format {r[s]['format']:.2f} acc {r[s]['accuracy']:.2f} "
              f"sub_format {r[s]['sub_format']:.2f} sub_expert "
              f"{r[s]['sub_expert']:.2f}" for s in ("train", "test")))


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  _flags = _define_flags()
  app.run(lambda argv: main(_flags))
