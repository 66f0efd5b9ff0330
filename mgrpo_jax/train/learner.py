"""One agent's learner: its parameters, optimizer and train step, on its mesh.

A step takes that agent's trajectories (token ids, loss mask, the
sampler's log-probs and weight version) and one advantage per trajectory,
and:
  1. packs them into a [N, T] batch: N padded to a multiple of the
     micro-batch, T to a bucket (min_len x 1, 1.5, 2, 3, 4, 6, ...), so a
     run compiles at most one step per bucket whatever its trajectories were;
  2. recomputes the old (proximal) log-probs with the current parameters
     (and the reference log-probs with the KL reference when beta > 0 or
     `log_ref_kl`, which logs ref_kl without adding it to the loss), on
     the mesh; with one inner epoch (mu = 1) the old log-probs are the
     loss's own forward pass under stop_gradient (same parameters, same
     numbers), so that extra forward pass is skipped;
  3. runs `mu` inner epochs; each is one jitted call of `train.update`
     (shared with SFT): the gradient accumulated over micro-batches inside
     jit of the loss total divided by the *global* denominator (so every
     token weighs the same whatever micro-batch it fell in), then one optax
     update (AdamW with global-norm clipping and a warm-up + cosine
     schedule). On a mesh each micro-batch's rows are split over its data
     axis (data parallel). A batch whose advantages are all zero makes no
     update (Adam's momentum would still move the weights):
     `skipped_update` says so.
Data parallel: every micro-batch's rows are split across the devices of
the mesh's `fsdp` axis (each computes 1/n of them; XLA sums the gradient)
while parameters and optimizer state stay sharded by the rules table
(models/sharding.py), so more chips make a step faster.
`learner.<agent>.micro_batch` and `sft.batch_size` must be multiples of
that axis' size (checked before any compute, train/run_checks.py).
Log-probs are those of the policy that sampled: log_softmax(logits / T) at
the rollouts' temperature T (T = 1 for greedy rollouts). Like the sampler's
recorded log-probs, and as TRL and verl do, they ignore top-k / top-p
truncation: both sides score the temperature-scaled distribution before
truncation, so on-policy they agree to float32 rounding: the largest gap
over a step's trained tokens, with the weights before the update, is
logged as `<agent>/behaviour_logp_gap_max` (< 1e-3 on-policy in float32,
tested at T = 1, 0.6, 0 and with top-k on multi-turn rollouts in
tests/learner_test.py, and on the default warm start at T = 0.6 with and
without top-k in the slow tests/objective_test.py). Stale data is
corrected against the recorded log-probs (core/importance.py,
`off_policy`). `aggregation="sequence_sum_norm"` divides by trajectories
x `max_len`, a constant (Dr. GRPO), not by the step's padded length.
No gradient ever leaves the agent: the learner only sees its own model.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mgrpo_jax.core import losses
from mgrpo_jax.models import lora
from mgrpo_jax.runtime import processes
from mgrpo_jax.runtime.programs import Programs
from mgrpo_jax.runtime.xla_options import training_options
from mgrpo_jax.train import update
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
  log_ref_kl: bool  # Log ref_kl even when beta = 0 (keeps the reference).
  aggregation: str
  off_policy: str  # Importance correction of stale data.
  is_cap: float  # Truncation cap of the importance weights.
  remat: bool  # Recompute each layer's activations in the backward pass.
  # Mixture-of-experts models: weight of the router's load-balancing loss
  # (0: only logged).
  router_aux_weight: float
  lora_rank: int  # Train low-rank adapters of this rank only (0: every weight).
  lora_alpha: float  # Adapters' scale is lora_alpha / lora_rank.
  lora_targets: tuple[str, ...]  # Matrices adapted (models/lora.py TARGETS).

  def __post_init__(self):
    for field in ("total_steps", "inner_epochs", "micro_batch", "min_len",
                  "max_len"):
      value = getattr(self, field)
      if not isinstance(value, int) or value < 1:
        raise ValueError(f"LearnerConfig.{field}={value!r}: expected a "
                         "positive integer.")
    if (isinstance(self.lora_rank, bool) or not isinstance(self.lora_rank, int)
        or self.lora_rank < 0):
      raise ValueError(f"LearnerConfig.lora_rank={self.lora_rank!r}: expected "
                       "an integer >= 0 (0: no adapters, every weight "
                       "trains).")
    if self.lora_rank and not (isinstance(self.lora_alpha, (int, float))
                               and self.lora_alpha > 0):
      raise ValueError(f"LearnerConfig.lora_alpha={self.lora_alpha!r}: "
                       "expected a number > 0.")
    for field in ("learning_rate", "weight_decay", "clip_norm", "beta",
                  "eps_low", "eps_high", "router_aux_weight"):
      value = getattr(self, field)
      if not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"LearnerConfig.{field}={value!r}: expected a "
                         "number >= 0.")
    for field in ("log_ref_kl", "remat"):
      if not isinstance(getattr(self, field), bool):
        raise ValueError(f"LearnerConfig.{field}={getattr(self, field)!r}: "
                         "expected True or False.")
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
    self.moe = bool(getattr(model.config, "num_experts", 0))
    # With LoRA the weights are a frozen base (shared with whoever else
    # holds them) and what trains, checkpoints and publishes is the
    # adapters (models/lora.py); the reference policy is the base alone.
    self.base, self.lora_scale = None, 1.0
    if config.lora_rank:
      self.base = self.params
      adapters = lora.init_adapters(
          model.config, config.lora_targets, rank=config.lora_rank,
          alpha=config.lora_alpha, key=jax.random.key(0))
      self.params, self.lora_scale = dict(adapters.weights), adapters.scale
      if mesh is not None:  # Small: replicated on the agent's devices.
        self.params = jax.device_put(self.params,
                                     NamedSharding(mesh, PartitionSpec()))
    self.optimizer = make_optimizer(config)
    # An abstract model (nnx.eval_shape) gives an abstract learner, whose
    # programs can be compiled and measured (`update_memory`), not run.
    self.abstract = all(isinstance(x, jax.ShapeDtypeStruct)
                        for x in jax.tree.leaves(self.params))
    self.opt_state = self._init_opt_state()
    self.ref_params = (None if not (config.beta > 0 or config.log_ref_kl)
                       else {} if config.lora_rank  # The base alone.
                       else self.params if self.abstract
                       else jax.tree.map(jnp.copy, self.params))
    self.step_count = 0
    self.traces = collections.Counter()
    update.check_micro_batch(config.micro_batch, mesh,
                      f"learner.{name}.micro_batch")
    # One compiled program per batch shape (`precompile`).
    self._logp = Programs(f"{name} log-probs", jax.jit(self._logp_all_fn))
    self._update = Programs(
        f"{name} update", jax.jit(self._update_fn, donate_argnums=(0, 1),
                                  compiler_options=training_options(),
                                  out_shardings=self._update_out_shardings()))

  def _update_out_shardings(self):
    """Parameters and optimizer state stay where they are; the figures
    come back replicated, so every process of a mesh over several reads
    them from its own devices (None: no mesh, jit decides)."""
    if self.mesh is None:
      return None
    keep = lambda tree: jax.tree.map(lambda x: x.sharding, tree)
    replicated = NamedSharding(self.mesh, PartitionSpec())
    return (keep(self.params), keep(self.opt_state), replicated, replicated,
            replicated)

  def _init_opt_state(self):
    """Optimizer state next to the parameters: Adam's moments take each
    parameter's sharding, scalars (the step count) are replicated."""
    if self.abstract:
      return jax.eval_shape(self.optimizer.init, self.params)
    if self.mesh is None:
      return jax.jit(self.optimizer.init)(self.params)
    abstract = jax.eval_shape(self.optimizer.init, self.params)
    shardings = optax.tree_utils.tree_map_params(
        self.optimizer, lambda _, p: p.sharding, abstract, self.params,
        transform_non_params=lambda _: NamedSharding(self.mesh,
                                                     PartitionSpec()))
    return jax.jit(self.optimizer.init, out_shardings=shardings)(self.params)

  # ------------------------------------------------------------ jitted parts

  def _logp_fn(self, params, base, inputs, targets, router_mask=None):
    """Log-probs of the targets; with `router_mask` (a mixture of experts)
    also the router's statistics over its tokens. With LoRA `params` are
    the adapters of the frozen `base` (None: `params` are the weights)."""
    adapters = None
    if base is not None:
      adapters = lora.Adapters(params, self.lora_scale)
      params = base
    model = nnx.merge(self.graphdef, params)
    kw = dict(remat=self.config.remat, adapters=adapters)
    if router_mask is None:
      logits, stats = model(inputs, **kw), None
    else:
      logits, stats = model.logits_and_routing(inputs, router_mask, **kw)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32) / self.temperature,
                              axis=-1)
    logp = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return logp if router_mask is None else (logp, stats)

  def _logp_all_fn(self, params, inputs_UxMxT, targets_UxMxT, base):
    self.traces["logp"] += 1
    return jax.lax.map(lambda xs: self._logp_fn(params, base, *xs),
                       (inputs_UxMxT, targets_UxMxT))

  def _loss_fn(self, params, xs, denom, micro_batches, base=None):
    """One micro-batch's loss total / the batch's denominator, and its
    (figures, trained tokens); a mixture of experts adds its router's
    load-balancing loss (over the trained tokens) x router_aux_weight /
    micro_batches, and logs it with the busiest expert's load."""
    inputs, targets, mask, old, ref, behaviour, adv = xs
    c = self.config
    if self.moe:
      logp, stats = self._logp_fn(params, base, inputs, targets, mask)
    else:
      logp, stats = self._logp_fn(params, base, inputs, targets), None
    old_logp = jax.lax.stop_gradient(logp) if old is None else old
    total, _, metrics = losses.policy_loss_terms(
        logp, old_logp, adv, mask, eps_low=c.eps_low, eps_high=c.eps_high,
        ref_logp_BxT=ref, beta=c.beta, aggregation=c.aggregation,
        behaviour_logp_BxT=behaviour, off_policy=c.off_policy,
        is_cap=c.is_cap, max_len=c.max_len)
    loss = total / denom
    if stats is not None:
      aux = stats.load_balancing_loss()
      metrics = {**metrics, "router_aux_loss": aux,
                 "expert_load_max": stats.load_max()}
      if c.router_aux_weight:
        loss = loss + c.router_aux_weight * aux / micro_batches
    return loss, (metrics, jnp.sum(mask))

  def _update_fn(self, params, opt_state, xs_U, num_rows, apply, base):
    self.traces["update"] += 1
    denom = self._denominator(xs_U[2], num_rows)
    micro_batches = xs_U[0].shape[0]
    return update.update(
        self.optimizer, lambda p, xs: self._loss_fn(p, xs, denom,
                                                    micro_batches, base),
        params, opt_state, xs_U, apply)

  # ------------------------------------------------------------------ steps

  def _rows(self, x: np.ndarray | None, local: bool = False
            ) -> jax.Array | None:
    """A packed [N, ...] array as [U, M, ...] micro-batches on the mesh,
    rows over its data axis. `local`: this process's columns of a batch
    each process packed its share of ([U, M / P, ...] here)."""
    if x is None:
      return None
    if local:
      share = self.config.micro_batch // processes.count()
      return update.put_process_rows(update.split_rows(x, share), self.mesh,
                                     processes.count())
    return update.put_rows(update.split_rows(x, self.config.micro_batch),
                           self.mesh)

  def logprobs(self, batch: Batch, *, reference: bool = False) -> jax.Array:
    """[U, M, T] log-probs of the targets per micro-batch (no gradient)."""
    return self._logp(self.ref_params if reference else self.params,
                      self._rows(batch.inputs_NxT, batch.local),
                      self._rows(batch.targets_NxT, batch.local), self.base)

  def _denominator(self, mask_UxMxT: jax.Array,
                   num_rows: jax.Array) -> jax.Array:
    """The loss denominator of the whole batch, inside the jitted update
    (no host round trip, nothing compiled apart): the aggregation's own
    over the packed rows, whose padding rows have no mask; for
    sequence_sum_norm the constant trajectories (num_rows) x max_len."""
    agg = losses.LOSS_AGGREGATIONS.get(self.config.aggregation)
    mask_NxT = mask_UxMxT.reshape(-1, mask_UxMxT.shape[-1])
    _, denom = agg(jnp.zeros_like(mask_NxT), mask_NxT,
                   max_len=self.config.max_len, rows=num_rows)
    return jnp.maximum(denom, 1.0)

  def step(self, batch: Batch) -> dict[str, float]:
    """One M-GRPO update of this agent (see the module docstring)."""
    inputs, targets, mask, adv, behaviour = (self._rows(a, batch.local)
                                             for a in (
        batch.inputs_NxT, batch.targets_NxT, batch.mask_NxT, batch.adv_N,
        batch.behaviour_NxT))
    # mu = 1: the only epoch runs on the parameters the old log-probs would
    # be recomputed with; the loss takes them from its own forward pass.
    # (On the rows already placed for the update: one transfer each.)
    old = (self._logp(self.params, inputs, targets, self.base)
           if self.config.inner_epochs > 1 else None)
    ref = (self._logp(self.ref_params, inputs, targets, self.base)
           if self.ref_params is not None else None)
    # Nothing to learn from (in any process's rows): no update.
    skip = not np.any(batch.adv_N)
    if batch.local:
      skip = not any(processes.gather(f"{self.name} advantages",
                                      not skip))
    xs_U = (inputs, targets, mask, old, ref, behaviour, adv)
    # Figures stay on the device until the update is done: one host read.
    pieces, norms = [], []
    for _ in range(1 if skip else self.config.inner_epochs):
      self.params, self.opt_state, grad_norm, values_U, aux_U = self._update(
          self.params, self.opt_state, xs_U, jnp.int32(batch.num_rows),
          jnp.bool_(not skip), self.base)
      pieces.append((values_U, aux_U))
      norms.append(grad_norm)
    pieces, norms = jax.device_get((pieces, norms))
    out = _combine([(values_U[u], tokens_U[u],
                     {k: v[u] for k, v in metrics_U.items()})
                    for values_U, (metrics_U, tokens_U) in pieces
                    for u in range(len(values_U))], len(norms))
    out["grad_norm"] = float(np.mean(norms))
    out["skipped_update"] = float(skip)
    known = (batch.version_N >= 0) & (batch.mask_NxT.sum(axis=1) > 0)
    counts = [float(batch.mask_NxT.sum()), float(batch.num_sequences),
              float(known.sum()),
              float(np.sum(self.step_count - batch.version_N[known]))]
    if batch.local:  # The whole batch's, from every process's rows.
      counts = np.sum(processes.gather(f"{self.name} counts", counts),
                      axis=0).tolist()
    out["tokens"], out["sequences"], known_rows, stale = counts
    if known_rows:  # Versions between the sampler and this learner.
      out["staleness"] = stale / known_rows
    self.step_count += 1
    return out

  def update_memory(self, micro_batches: int, length: int) -> dict[str, int]:
    """XLA's memory analysis of the update of `micro_batches` micro-batches
    of [micro_batch, length] rows, compiled from shapes alone (no weights
    needed: works on an abstract learner): bytes of its arguments
    (parameters, optimizer state, batch), outputs, and temporaries (the
    activations kept for the backward pass, logits, gradients)."""
    u, m = micro_batches, self.config.micro_batch
    spec = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype)
    ids, floats = spec((u, m, length), jnp.int32), spec((u, m, length),
                                                          jnp.float32)
    as_abstract = lambda tree: jax.tree.map(
        lambda x: spec(x.shape, x.dtype), tree)
    ref = floats if self.ref_params is not None else None
    xs_U = (ids, ids, floats, None, ref, floats, spec((u, m), jnp.float32))
    stats = self._update.jitted.lower(
        as_abstract(self.params), as_abstract(self.opt_state), xs_U,
        spec((), jnp.int32), spec((), jnp.bool_),
        as_abstract(self.base)).compile().memory_analysis()
    return {"arguments": int(stats.argument_size_in_bytes),
            "outputs": int(stats.output_size_in_bytes),
            "temporaries": int(stats.temp_size_in_bytes)}

  def precompile(self, rows: int, lengths: Sequence[int], *,
                 behaviour: bool = True, local: bool = False,
                 strict: bool = False) -> tuple[int, float]:
    """Compiles the update (and the log-prob passes it needs) of a packed
    batch of `rows` rows for each padded length in `lengths`; `behaviour`:
    the batches carry the sampler's log-probs; `local`: each process packs
    its share. From then on, with `strict`, a batch of another shape stops
    with `runtime.programs.ShapeError`. Returns (programs, seconds)."""
    start = time.perf_counter()
    for t in lengths:
      ids, floats = np.zeros((rows, t), np.int32), np.zeros((rows, t),
                                                            np.float32)
      inputs, targets, mask = (self._rows(x, local) for x in (ids, ids,
                                                              floats))
      old = ref = None
      if self.config.inner_epochs > 1 or self.ref_params is not None:
        logp_call = (self.params, inputs, targets, self.base)
        self._logp.precompile([logp_call])
        logp_out = self._logp.out_info(logp_call)
        old = logp_out if self.config.inner_epochs > 1 else None
        ref = logp_out if self.ref_params is not None else None
      xs_U = (inputs, targets, mask, old, ref,
              self._rows(floats, local) if behaviour else None,
              self._rows(np.zeros(rows, np.float32), local))
      self._update.precompile([(self.params, self.opt_state, xs_U,
                                jnp.int32(0), jnp.bool_(True), self.base)])
    for programs in (self._logp, self._update):
      programs.strict = strict
    return self._logp.count + self._update.count, time.perf_counter() - start

  def model(self) -> nnx.Module:
    """The current weights as a model (e.g. for `Engine.update_weights`)."""
    if self.base is None:
      return nnx.merge(self.graphdef, self.params)
    return nnx.merge(self.graphdef, lora.merged_state(self.base,
                                                      self.adapters))

  @property
  def adapters(self) -> lora.Adapters | None:
    """With LoRA, the trained adapters (None: every weight trains)."""
    return (None if self.base is None
            else lora.Adapters(self.params, self.lora_scale))


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
