"""Supervised warm start: next-token cross-entropy on agent demonstrations.

Before RL, a model (the tiny from-scratch one above all) must already speak
the protocol, or every rollout is a format failure and every reward 0. SFT
trains it on trajectories (e.g. `agents.demonstrations.demonstrations`): the same
token ids and loss masks the rollout controller produces, so it learns
exactly the turns an agent writes, never the prompts or tool outputs.

A step packs B trajectories with the learner's `pack` (T padded to a
bucket of 1, 1.5, 2, 3, 4, ... x min_len, compiled once each), then minimises the
token mean of the masked cross-entropy over the whole batch (micro-batches
of `micro_batch` rows are accumulated inside one jitted step by
`train.update`, the RL learner's update with this loss passed in, each
divided by the batch's token count), with the learner's optimizer (`make_optimizer`: global-norm clipping, AdamW, warm-up + cosine).

The tiny team's warm start is measured by `python -m mgrpo_jax.bench.sft_study`
(bench/sft_study.py).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh

from mgrpo_jax.agents.trajectory import Trajectory
from mgrpo_jax.runtime.xla_options import training_options
from mgrpo_jax.train import update
from mgrpo_jax.train.learner import LearnerConfig, make_optimizer
from mgrpo_jax.train.packing import Batch, pack


def masked_nll(logits_BxTxV: jax.Array, targets_BxT: jax.Array,
               mask_BxT: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(sum of -log p(target) over the mask, masked argmax hits)."""
  logp_BxTxV = jax.nn.log_softmax(logits_BxTxV.astype(jnp.float32), axis=-1)
  nll_BxT = -jnp.take_along_axis(logp_BxTxV, targets_BxT[..., None],
                                 axis=-1)[..., 0]
  hits_BxT = jnp.argmax(logits_BxTxV, axis=-1) == targets_BxT
  return jnp.sum(nll_BxT * mask_BxT), jnp.sum(hits_BxT * mask_BxT)


def sft_loss(graphdef: nnx.GraphDef, count: jax.Array) -> update.LossFn:
  """One micro-batch's masked cross-entropy / the batch's token `count`,
  with its argmax hits as aux."""

  def loss_fn(params, xs):
    inputs, targets, mask = xs
    total, correct = masked_nll(nnx.merge(graphdef, params)(inputs), targets,
                                mask)
    return total / count, correct

  return loss_fn


def sft_step(graphdef: nnx.GraphDef, optimizer: optax.GradientTransformation,
             params: nnx.State, opt_state: optax.OptState,
             inputs_UxMxT: jax.Array, targets_UxMxT: jax.Array,
             mask_UxMxT: jax.Array) -> tuple[nnx.State, optax.OptState,
                                             dict[str, jax.Array]]:
  """One update (`train.update`, as RL's): masked token-mean cross-entropy
  over the U micro-batches of M rows, gradients accumulated inside jit."""
  count = jnp.maximum(jnp.sum(mask_UxMxT), 1.0)
  params, opt_state, grad_norm, values_U, hits_U = update.update(
      optimizer, sft_loss(graphdef, count), params, opt_state,
      (inputs_UxMxT, targets_UxMxT, mask_UxMxT))
  metrics = {"loss": jnp.sum(values_U), "accuracy": jnp.sum(hits_U) / count,
             "grad_norm": grad_norm, "tokens": jnp.sum(mask_UxMxT)}
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

    update.check_micro_batch(config.micro_batch, mesh, "sft.batch_size")

    def step(*args):
      self.traces += 1
      return sft_step(self.graphdef, self.optimizer, *args)

    self._step = jax.jit(step, donate_argnums=(0, 1),
                         compiler_options=training_options())

  def batch(self, trajectories: Sequence[Trajectory]) -> Batch:
    """The trajectories packed (advantage 1, unused by SFT)."""
    c = self.config
    return pack([t.tokens for t in trajectories],
                [t.loss_mask for t in trajectories],
                [1.0] * len(trajectories), micro_batch=c.micro_batch,
                min_len=c.min_len, max_len=c.max_len)

  def _rows(self, x: np.ndarray) -> jax.Array:
    """[N, T] -> [U, M, T] micro-batches, rows over the mesh's data axis."""
    return update.put_rows(update.split_rows(x, self.config.micro_batch),
                           self.mesh)

  def step(self, batch: Batch | Sequence[Trajectory]) -> dict[str, float]:
    """One update on a packed batch (or on trajectories, packed here);
    returns loss (mean nats per trained token), accuracy (argmax hits per
    trained token), grad_norm and tokens."""
    if not isinstance(batch, Batch):
      batch = self.batch(batch)
    self.params, self.opt_state, metrics = self._step(
        self.params, self.opt_state, self._rows(batch.inputs_NxT),
        self._rows(batch.targets_NxT), self._rows(batch.mask_NxT))
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


def sft_learner_config(learner: Mapping[str, Any], *, steps: int,
                       batch_size: int, learning_rate: float,
                       max_len: int) -> LearnerConfig:
  """The warm start's optimizer and packing settings: a run's `learner.main`
  section (clipping, AdamW betas, weight decay) with SFT's own learning
  rate, a warm-up of min(10, steps // 10) steps, cosine decay over `steps`,
  micro-batch `batch_size` and T buckets from 64 to `max_len`; every
  weight trains (no LoRA adapters)."""
  return LearnerConfig(**{
      **dict(learner), "learning_rate": learning_rate,
      "warmup_steps": min(10, steps // 10), "total_steps": steps,
      "micro_batch": batch_size, "min_len": 64, "max_len": max_len,
      "lora_rank": 0})  # The warm start trains every weight.


def warm_start(model: nnx.Module, trajectories: Sequence[Trajectory], *,
               steps: int, batch_size: int, config: LearnerConfig,
               seed: int = 0, mesh: Mesh | None = None,
               on_step: Callable[[int, dict[str, float]], Any] | None = None
               ) -> tuple[nnx.Module, list[float]]:
  """SFT of `model` on `trajectories`; returns the trained model and the
  loss of every step.

  Args:
    model: the decoder to train (its weights are not modified in place).
    trajectories: demonstrations; those with nothing to learn (empty loss
      mask) are skipped.
    steps: optimizer updates.
    batch_size: trajectories per update.
    config: optimizer / packing settings (e.g. `sft_learner_config`).
    seed: seeds the order of the trajectories.
    mesh: where the batch goes (rows over its data axis); parameters stay
      where they are.
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
  trainer = SFTTrainer(model, config, mesh)
  rng = np.random.default_rng(seed)
  losses = []
  for step, index in enumerate(batches(len(usable), batch_size, steps, rng)):
    metrics = trainer.step([usable[i] for i in index])
    losses.append(metrics["loss"])
    if on_step is not None:
      on_step(step, metrics)
  return trainer.model(), losses
