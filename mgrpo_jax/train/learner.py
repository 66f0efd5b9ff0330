"""One agent's learner: its parameters, optimizer and train step, on its mesh.

A step takes that agent's trajectories (token ids, loss mask, the
sampler's log-probs and weight version) and one advantage per trajectory,
and:
  1. packs them into a [N, T] batch: N padded to a multiple of the
     micro-batch, T to a bucket (min_len x 1, 1.5, 2, 3, 4, 6, ...), so a
     run compiles at most one step per bucket whatever its trajectories were;
  2. recomputes the old (proximal) log-probs with the current parameters
     (and the reference log-probs with the KL reference when beta > 0), on
     the mesh; with one inner epoch (mu = 1) the old log-probs are the
     loss's own forward pass under stop_gradient (same parameters, same
     numbers), so that extra forward pass is skipped;
  3. runs `mu` inner epochs; each accumulates the gradient over micro-batches
     of the loss total divided by the *global* denominator (so every token
     weighs the same whatever micro-batch it fell in), then applies one
     optax update (AdamW with global-norm clipping and a warm-up + cosine
     schedule). A batch whose advantages are all zero makes no update (Adam's
     momentum would still move the weights): `skipped_update` says so.
Log-probs are those of the policy that sampled: log_softmax(logits / T) at
the rollouts' temperature T (T = 1 for greedy rollouts). Like the sampler's
recorded log-probs, and as TRL and verl do, they ignore top-k / top-p
truncation: both sides score the temperature-scaled distribution before
truncation, so on-policy they agree to float32 rounding
(`behaviour_logp_gap_max`). Stale data is corrected against the recorded
log-probs (core/importance.py, `off_policy`).
No gradient ever leaves the agent: the learner only sees its own model.
"""

from __future__ import annotations

import collections
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mgrpo_jax.core import losses
from mgrpo_jax.train.packing import Batch


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
  """Optimizer and loss settings of one agent. The values come from a run
  config's `learner.<agent>` section (configs/default.py holds the one
  default of each and comments every field); this class only validates."""
  learning_rate: float  # AdamW peak learning rate.
  warmup_steps: int  # Linear warm-up steps.
  total_steps: int  # Length of the cosine decay (to 10%).
  weight_decay: float
  clip_norm: float  # Global gradient-norm clip.
  b1: float
  b2: float
  inner_epochs: int  # mu: updates per batch of rollouts.
  micro_batch: int  # Sequences per forward/backward pass.
  min_len: int  # Smallest sequence bucket T.
  max_len: int  # Longest sequence; longer ones are cut (the tail).
  eps_low: float
  eps_high: float
  beta: float  # KL weight towards the initial policy (k3).
  aggregation: str
  off_policy: str  # Importance correction of stale data.
  is_cap: float  # Truncation cap of the importance weights.

  def __post_init__(self):
    for field in ("total_steps", "inner_epochs", "micro_batch", "min_len",
                  "max_len"):
      value = getattr(self, field)
      if not isinstance(value, int) or value < 1:
        raise ValueError(f"LearnerConfig.{field}={value!r}: expected a "
                         "positive integer.")
    for field in ("learning_rate", "weight_decay", "clip_norm", "beta",
                  "eps_low", "eps_high"):
      value = getattr(self, field)
      if not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"LearnerConfig.{field}={value!r}: expected a "
                         "number >= 0.")
    if self.aggregation not in losses.LOSS_AGGREGATIONS:
      raise ValueError(f"LearnerConfig.aggregation={self.aggregation!r}: "
                       f"expected one of {sorted(losses.LOSS_AGGREGATIONS)}.")
    if self.off_policy not in losses.OFF_POLICY:
      raise ValueError(f"LearnerConfig.off_policy={self.off_policy!r}: "
                       f"expected one of {list(losses.OFF_POLICY)}.")
    if not isinstance(self.is_cap, (int, float)) or self.is_cap < 1:
      raise ValueError(f"LearnerConfig.is_cap={self.is_cap!r}: expected a "
                       "number >= 1.")


def _schedule(config: LearnerConfig) -> optax.Schedule:
  return optax.warmup_cosine_decay_schedule(
      0.0 if config.warmup_steps else config.learning_rate,
      config.learning_rate, max(config.warmup_steps, 1),
      max(config.total_steps, config.warmup_steps + 1),
      end_value=0.1 * config.learning_rate)


def make_optimizer(config: LearnerConfig) -> optax.GradientTransformation:
  return optax.chain(
      optax.clip_by_global_norm(config.clip_norm),
      optax.adamw(_schedule(config), b1=config.b1, b2=config.b2,
                  weight_decay=config.weight_decay))


class Learner:
  """Parameters, optimizer state and jitted steps of one agent."""

  def __init__(self, name: str, model: nnx.Module, config: LearnerConfig,
               mesh: Mesh | None = None, *, temperature: float = 1.0):
    """`model` holds the initial weights (also the KL reference when
    beta > 0); `temperature` is the rollouts' sampling temperature, so the
    learner scores tokens under the distribution they were drawn from (0,
    greedy rollouts, scores at temperature 1, as the sampler records)."""
    if isinstance(temperature, bool) or not isinstance(
        temperature, (int, float)) or not temperature >= 0:
      raise ValueError(f"Learner {name!r}: temperature={temperature!r}: "
                       "expected a number >= 0 (0 = greedy rollouts).")
    self.name, self.config, self.mesh = name, config, mesh
    self.temperature = float(temperature) if temperature > 0 else 1.0
    self.graphdef, self.params = nnx.split(model)
    self.optimizer = make_optimizer(config)
    self.opt_state = self._init_opt_state()
    self.ref_params = (jax.tree.map(jnp.copy, self.params)
                       if config.beta > 0 else None)
    self.step_count = 0
    self.traces = collections.Counter()
    self._logp = jax.jit(self._logp_fn)
    self._grad = jax.jit(self._grad_fn)
    self._apply = jax.jit(self._apply_fn, donate_argnums=(0, 1))

  def _init_opt_state(self):
    """Optimizer state next to the parameters: Adam's moments take each
    parameter's sharding, scalars (the step count) are replicated."""
    if self.mesh is None:
      return jax.jit(self.optimizer.init)(self.params)
    abstract = jax.eval_shape(self.optimizer.init, self.params)
    shardings = optax.tree_utils.tree_map_params(
        self.optimizer, lambda _, p: p.sharding, abstract, self.params,
        transform_non_params=lambda _: NamedSharding(self.mesh,
                                                     PartitionSpec()))
    return jax.jit(self.optimizer.init, out_shardings=shardings)(self.params)

  # ------------------------------------------------------------ jitted parts

  def _logp_fn(self, params, inputs, targets):
    self.traces["logp"] += 1
    logits = nnx.merge(self.graphdef, params)(inputs)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32) / self.temperature,
                              axis=-1)
    return jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]

  def _grad_fn(self, params, inputs, targets, mask, old, ref, behaviour, adv,
               denom):
    self.traces["grad"] += 1
    c = self.config

    def loss(params):
      logp = self._logp_fn(params, inputs, targets)
      old_logp = jax.lax.stop_gradient(logp) if old is None else old
      total, _, metrics = losses.policy_loss_terms(
          logp, old_logp, adv, mask, eps_low=c.eps_low, eps_high=c.eps_high,
          ref_logp_BxT=ref, beta=c.beta, aggregation=c.aggregation,
          behaviour_logp_BxT=behaviour, off_policy=c.off_policy,
          is_cap=c.is_cap, max_len=c.max_len)
      return total / denom, metrics

    (value, metrics), grads = jax.value_and_grad(loss, has_aux=True)(params)
    return value, grads, metrics

  def _apply_fn(self, params, opt_state, grads):
    self.traces["apply"] += 1
    updates, opt_state = self.optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, optax.tree.norm(
        grads)

  # ------------------------------------------------------------------ steps

  def _put(self, x: np.ndarray) -> jax.Array:
    if self.mesh is None:
      return jnp.asarray(x)
    return jax.device_put(x, NamedSharding(self.mesh, PartitionSpec()))

  def _micro(self, batch: Batch):
    m = self.config.micro_batch
    for i in range(0, batch.inputs_NxT.shape[0], m):
      yield tuple(None if a is None else self._put(a[i:i + m]) for a in (
          batch.inputs_NxT, batch.targets_NxT, batch.mask_NxT, batch.adv_N,
          batch.behaviour_NxT))

  def logprobs(self, batch: Batch, *, reference: bool = False) -> list:
    """Per micro-batch [m, T] log-probs of the targets (no gradient)."""
    params = self.ref_params if reference else self.params
    return [self._logp(params, inputs, targets)
            for inputs, targets, *_ in self._micro(batch)]

  def _denominator(self, batch: Batch) -> float:
    """The loss denominator of the whole batch (aggregation's own; for
    sequence_sum_norm the constant trajectories x max_len)."""
    agg = losses.LOSS_AGGREGATIONS.get(self.config.aggregation)
    mask = jnp.asarray(batch.mask_NxT[:batch.num_rows])
    _, denom = agg(jnp.zeros_like(mask), mask, max_len=self.config.max_len)
    return max(float(denom), 1.0)

  def step(self, batch: Batch) -> dict[str, float]:
    """One M-GRPO update of this agent (see the module docstring)."""
    num_micro = -(-batch.inputs_NxT.shape[0] // self.config.micro_batch)
    # mu = 1: the only epoch runs on the parameters the old log-probs would
    # be recomputed with; the loss takes them from its own forward pass.
    old = (self.logprobs(batch) if self.config.inner_epochs > 1
           else [None] * num_micro)
    ref = (self.logprobs(batch, reference=True) if self.ref_params is not None
           else [None] * num_micro)
    denom = jnp.float32(self._denominator(batch))
    skip = not np.any(batch.adv_N)  # Nothing to learn from: no update.
    # Figures stay on the device until the update is done: one host read.
    pieces, norms = [], []
    for _ in range(1 if skip else self.config.inner_epochs):
      grads_total = None
      for j, (inputs, targets, mask, adv, behaviour) in enumerate(
          self._micro(batch)):
        value, grads, metrics = self._grad(self.params, inputs, targets, mask,
                                           old[j], ref[j], behaviour, adv,
                                           denom)
        grads_total = grads if grads_total is None else jax.tree.map(
            jnp.add, grads_total, grads)
        pieces.append((value, jnp.sum(mask), metrics))
      if skip:
        norms.append(optax.tree.norm(grads_total))
      else:
        self.params, self.opt_state, grad_norm = self._apply(
            self.params, self.opt_state, grads_total)
        norms.append(grad_norm)
    pieces, norms = jax.device_get((pieces, norms))
    out = _combine(pieces, len(norms))
    out["grad_norm"] = float(np.mean(norms))
    out["skipped_update"] = float(skip)
    out["tokens"] = float(batch.mask_NxT.sum())
    out["sequences"] = float(batch.num_sequences)
    known = (batch.version_N >= 0) & (batch.mask_NxT.sum(axis=1) > 0)
    if known.any():  # Versions between the sampler and this learner.
      out["staleness"] = float(np.mean(self.step_count
                                       - batch.version_N[known]))
    self.step_count += 1
    return out

  def model(self) -> nnx.Module:
    """The current weights as a model (e.g. for `Engine.update_weights`)."""
    return nnx.merge(self.graphdef, self.params)


def _combine(pieces, epochs: int) -> dict[str, float]:
  """Per-update figures from each micro-batch's (loss, tokens, metrics):
  the loss summed (each piece is already divided by the batch's
  denominator) and averaged over epochs; `*_max` metrics the maximum;
  the rest token-weighted means."""
  sums = collections.defaultdict(float)
  weight = 0.0
  for value, tokens, metrics in pieces:
    sums["loss"] += float(value)
    weight += float(tokens)
    for k, v in metrics.items():
      if k.endswith("_max"):
        sums[k] = max(sums[k], float(v))
      elif k != "num_tokens":  # Reported once, as `tokens`, by the caller.
        sums[k] += float(v) * float(tokens)
  weight = max(weight, 1.0)
  return {k: (v / epochs if k == "loss" else
              v if k.endswith("_max") else v / weight)
          for k, v in sums.items()}
