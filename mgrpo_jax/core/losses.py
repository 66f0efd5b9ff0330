"""Token-level clipped policy loss with asymmetric clipping (M-GRPO objective).

Shape letters: B sequences, T tokens.

  ratio_t = exp(logp_t - old_logp_t)
  loss_t  = -min(ratio_t * A, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A)
            + beta * kl_t,     kl_t = exp(r_t) - r_t - 1,  r_t = ref_t - logp_t

The asymmetric clip (eps_high > eps_low, "clip-higher") is from DAPO (Yu et al.
2025); the k3 KL estimator from Schulman's note and GRPO (Shao et al. 2024).

With the sampler's own log-probs (`behaviour_logp_BxT`) the loss corrects
stale data (core/importance.py): "none" anchors the ratio to them; "token"
and "sequence" anchor it to `old_logp_BxT` (the proximal policy: the
learner's weights before the update) and weight each token's loss by the
truncated importance weight min(pi_old / pi_behav, cap).

The loss computes in float32 whatever the input dtype.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from mgrpo_jax.core import checks
from mgrpo_jax.core.importance import OFF_POLICY, importance_weights
from mgrpo_jax.core.registry import LOSS_AGGREGATIONS

_FN = "clipped_policy_loss"


@LOSS_AGGREGATIONS.register("token_mean")
def _token_mean(loss_BxT, mask_BxT, max_len=None, rows=None):
  """Sum over all masked tokens / their count (DAPO)."""
  return jnp.sum(loss_BxT * mask_BxT), jnp.sum(mask_BxT)


@LOSS_AGGREGATIONS.register("sequence_mean")
def _sequence_mean(loss_BxT, mask_BxT, max_len=None, rows=None):
  """Mean over sequences of each sequence's token mean (GRPO).

  Sequences without a masked token take no part (they neither add 0 nor count).
  """
  count_B = jnp.sum(mask_BxT, axis=1)
  seq_B = jnp.sum(loss_BxT * mask_BxT, axis=1) / jnp.maximum(count_B, 1.0)
  return jnp.sum(seq_B), jnp.sum((count_B > 0).astype(jnp.float32))


@LOSS_AGGREGATIONS.register("sequence_sum_norm")
def _sequence_sum_norm(loss_BxT, mask_BxT, max_len=None, rows=None):
  """Sum over masked tokens / (B * max_len): a constant normaliser (Dr.
  GRPO). `max_len` is the configured longest sequence, so the denominator
  does not follow the step's padded length; without it, the array's T.
  `rows` (may be traced) is B when padding rows follow the trajectories;
  without it, the array's B."""
  t = loss_BxT.shape[1] if max_len is None else max_len
  b = loss_BxT.shape[0] if rows is None else rows
  return jnp.sum(loss_BxT * mask_BxT), jnp.asarray(b, jnp.float32) * t


def policy_loss_terms(
    logp_BxT: jax.Array,
    old_logp_BxT: jax.Array,
    adv_B: jax.Array,
    mask_BxT: jax.Array,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    ref_logp_BxT: jax.Array | None = None,
    beta: float = 0.0,
    aggregation: str = "token_mean",
    behaviour_logp_BxT: jax.Array | None = None,
    off_policy: str = "token",
    is_cap: float = 2.0,
    max_len: int | None = None,
) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
  """Like `clipped_policy_loss` but returns (total, denominator, metrics).

  For gradient accumulation over micro-batches: sum the totals and the
  denominators over micro-batches and divide once, so every token weighs the
  same whatever micro-batch it fell in. Arguments as `clipped_policy_loss`.
  """
  logp_BxT = checks.check_array(_FN, "logp_BxT", logp_BxT, ndim=2, kinds="f")
  shape = logp_BxT.shape
  old_logp_BxT = checks.check_array(_FN, "old_logp_BxT", old_logp_BxT, ndim=2,
                                    kinds="f")
  checks.check_same_shape(_FN, "old_logp_BxT", old_logp_BxT, "logp_BxT", shape)
  adv_B = checks.check_array(_FN, "adv_B", adv_B, ndim=1, kinds="f")
  checks.check_same_shape(_FN, "adv_B", adv_B, "logp_BxT's first axis",
                          shape[:1])
  mask_BxT = checks.check_array(_FN, "mask_BxT", mask_BxT, ndim=2, kinds="bif")
  checks.check_same_shape(_FN, "mask_BxT", mask_BxT, "logp_BxT", shape)
  eps_low = checks.check_static_float(_FN, "eps_low", eps_low, minimum=0.0,
                                      maximum=1.0)
  eps_high = checks.check_static_float(_FN, "eps_high", eps_high, minimum=0.0)
  beta = checks.check_static_float(_FN, "beta", beta, minimum=0.0)
  is_cap = checks.check_static_float(_FN, "is_cap", is_cap, minimum=1.0)
  aggregate = LOSS_AGGREGATIONS.get(aggregation, arg="aggregation")
  if ref_logp_BxT is not None:
    ref_logp_BxT = checks.check_array(_FN, "ref_logp_BxT", ref_logp_BxT,
                                      ndim=2, kinds="f")
    checks.check_same_shape(_FN, "ref_logp_BxT", ref_logp_BxT, "logp_BxT",
                            shape)
  elif beta > 0.0:
    checks.fail(_FN, "ref_logp_BxT", "given when beta > 0 (the KL penalty "
                "needs the reference policy's log-probs)", None)
  if off_policy not in OFF_POLICY:
    checks.fail(_FN, "off_policy", f"one of {list(OFF_POLICY)}", off_policy)
  if behaviour_logp_BxT is not None:
    behaviour_logp_BxT = checks.check_array(
        _FN, "behaviour_logp_BxT", behaviour_logp_BxT, ndim=2, kinds="f")
    checks.check_same_shape(_FN, "behaviour_logp_BxT", behaviour_logp_BxT,
                            "logp_BxT", shape)

  # Compute in float32 whatever the input dtype (bf16 ratios lose too much).
  mask = mask_BxT.astype(jnp.float32)
  on = mask > 0
  logp = logp_BxT.astype(jnp.float32)
  # Zero the log-ratio on padding so garbage there cannot make inf/NaN
  # (a NaN in a masked-out position would still poison the gradient).
  old = old_logp_BxT.astype(jnp.float32)
  metrics: dict[str, Any] = {}
  weights = jnp.ones_like(mask)
  if behaviour_logp_BxT is not None:
    behaviour = behaviour_logp_BxT.astype(jnp.float32)
    weights, truncated = importance_weights(old, behaviour, mask,
                                            mode=off_policy, cap=is_cap)
    metrics.update(is_weight_mean=weights, is_truncated_fraction=truncated)
    gap_max = jnp.max(jnp.where(on, jnp.abs(old - behaviour), 0.0),
                      initial=0.0)
    if off_policy == "none":
      old = behaviour
  log_ratio = jnp.where(on, logp - old, 0.0)
  ratio = jnp.exp(log_ratio)
  adv = adv_B.astype(jnp.float32)[:, None]
  unclipped = ratio * adv
  clipped = jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
  pg_loss = -jnp.minimum(unclipped, clipped) * weights
  loss = pg_loss
  if ref_logp_BxT is not None:
    ref_log_ratio = jnp.where(on, ref_logp_BxT.astype(jnp.float32) - logp, 0.0)
    kl = jnp.exp(ref_log_ratio) - ref_log_ratio - 1.0
    if beta > 0.0:  # beta = 0 only logs it (no 0 * inf from a far policy).
      loss = pg_loss + beta * kl
    metrics["ref_kl"] = kl
  total, denominator = aggregate(loss, mask, max_len=max_len)

  # Metrics: token means over masked tokens, without gradient.
  count = jnp.maximum(jnp.sum(mask), 1.0)

  def token_mean(x):
    return jax.lax.stop_gradient(jnp.sum(x * mask) / count)

  is_clipped = ((ratio < 1.0 - eps_low) & (adv < 0)) | (
      (ratio > 1.0 + eps_high) & (adv > 0))
  metrics = {k: token_mean(v) for k, v in metrics.items()}
  metrics.update(
      pg_loss=token_mean(pg_loss),
      clip_fraction=token_mean(is_clipped.astype(jnp.float32)),
      # k3 estimate of KL(old || new) from tokens sampled by the old policy.
      approx_kl=token_mean(jnp.expm1(log_ratio) - log_ratio),
      ratio_mean=token_mean(ratio),
      num_tokens=jax.lax.stop_gradient(jnp.sum(mask)),
  )
  if behaviour_logp_BxT is not None:
    metrics["behaviour_logp_gap_max"] = jax.lax.stop_gradient(gap_max)
  return total, denominator, metrics


def clipped_policy_loss(
    logp_BxT: jax.Array,
    old_logp_BxT: jax.Array,
    adv_B: jax.Array,
    mask_BxT: jax.Array,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    ref_logp_BxT: jax.Array | None = None,
    beta: float = 0.0,
    aggregation: str = "token_mean",
    behaviour_logp_BxT: jax.Array | None = None,
    off_policy: str = "token",
    is_cap: float = 2.0,
    max_len: int | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Clipped surrogate loss of one agent's batch (see the module docstring).

  Args:
    logp_BxT: [B, T] log-probs of the sampled tokens under the current policy
      (the only input that carries gradient).
    old_logp_BxT: [B, T] log-probs under the learner's weights before this
      update (the proximal policy; on-policy, the policy that sampled).
    adv_B: [B] advantage of each sequence, shared by its tokens.
    mask_BxT: [B, T] 1 on tokens this agent generated, 0 elsewhere (prompt,
      tool output, padding).
    eps_low: lower clip range, ratio >= 1 - eps_low.
    eps_high: upper clip range, ratio <= 1 + eps_high.
    ref_logp_BxT: [B, T] reference-policy log-probs; required when beta > 0.
    beta: weight of the k3 KL penalty towards the reference policy.
    aggregation: a name in `LOSS_AGGREGATIONS`: "token_mean",
      "sequence_mean" or "sequence_sum_norm".
    behaviour_logp_BxT: [B, T] log-probs the sampler recorded; None treats
      the data as on-policy (old_logp_BxT sampled it).
    off_policy: correction of stale data, one of core.importance.OFF_POLICY.
    is_cap: truncation cap of the importance weights (>= 1).
    max_len: the configured longest sequence: sequence_sum_norm divides by
      B * max_len (None: by B * T).

  Returns:
    loss: float32 scalar.
    metrics: float32 scalars: pg_loss, clip_fraction (share of tokens whose
      gradient the clip removed), approx_kl (k3 estimate of KL(old || new)),
      ratio_mean, num_tokens and, with a reference, ref_kl. All are token
      means over masked tokens, without gradient. With behaviour log-probs
      also is_weight_mean, is_truncated_fraction (token means) and
      behaviour_logp_gap_max (max |old - behaviour| over masked tokens).
  """
  total, denominator, metrics = policy_loss_terms(
      logp_BxT, old_logp_BxT, adv_B, mask_BxT, eps_low=eps_low,
      eps_high=eps_high, ref_logp_BxT=ref_logp_BxT, beta=beta,
      aggregation=aggregation, behaviour_logp_BxT=behaviour_logp_BxT,
      off_policy=off_policy, is_cap=is_cap, max_len=max_len)
  return total / jnp.maximum(denominator, 1.0), metrics
