"""Truncated importance weights and the loss's off-policy modes, against a
NumPy reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.core.importance import importance_weights
from mgrpo_jax.core.losses import policy_loss_terms


def stale_batch(seed=0, b=3, t=6):
  """Proximal and behaviour log-probs that differ by up to ~1.2 nats."""
  rng = np.random.default_rng(seed)
  prox = np.log(rng.uniform(0.05, 0.9, (b, t))).astype(np.float32)
  behav = (prox + rng.uniform(-1.2, 1.2, (b, t))).astype(np.float32)
  mask = (rng.random((b, t)) < 0.7).astype(np.float32)
  mask[:, 0] = 1.0
  return prox, behav, mask


def reference_weights(prox, behav, mask, mode, cap):
  log_w = np.where(mask > 0, prox.astype(np.float64) - behav, 0.0)
  if mode == "sequence":
    log_w = np.repeat(log_w.sum(axis=1, keepdims=True), log_w.shape[1], 1)
  w = np.exp(log_w)
  truncated = (w > cap) & (mask > 0)
  return np.where(mask > 0, np.minimum(w, cap), 1.0), truncated


@pytest.mark.parametrize("mode", ["token", "sequence"])
@pytest.mark.parametrize("cap", [1.0, 2.0, 5.0])
def test_weights_equal_the_numpy_reference(mode, cap):
  prox, behav, mask = stale_batch()
  w, truncated = importance_weights(prox, behav, mask, mode=mode, cap=cap)
  want_w, want_t = reference_weights(prox, behav, mask, mode, cap)
  # Weights are exp of a difference of O(1) logs: float32 rounding ~1e-6.
  np.testing.assert_allclose(np.asarray(w), want_w, rtol=1e-5)
  np.testing.assert_array_equal(np.asarray(truncated) > 0, want_t)
  assert want_t.any() or cap > 1.0  # A cap of 1 cuts every gain.


def test_none_weighs_nothing_and_long_stale_sequences_do_not_overflow():
  prox, behav, mask = stale_batch()
  w, truncated = importance_weights(prox, behav, mask, mode="none")
  assert np.all(np.asarray(w) == 1) and not np.asarray(truncated).any()
  big = np.full((1, 4000), 0.5, np.float32)  # exp(2000) overflows float32.
  w, _ = importance_weights(big, np.zeros_like(big), np.ones_like(big),
                            mode="sequence", cap=2.0)
  assert np.all(np.asarray(w) == 2.0)


def test_weights_carry_no_gradient():
  prox, behav, mask = stale_batch()
  grad = jax.grad(lambda p: jnp.sum(importance_weights(
      p, behav, mask, mode="token", cap=10.0)[0]))(jnp.asarray(prox))
  assert np.all(np.asarray(grad) == 0)


def reference_loss(logp, prox, behav, adv, mask, mode, cap, eps=(0.2, 0.28)):
  anchor = behav if mode == "none" else prox
  ratio = np.exp(np.where(mask > 0, logp.astype(np.float64) - anchor, 0.0))
  w = (np.ones_like(ratio) if mode == "none"
       else reference_weights(prox, behav, mask, mode, cap)[0])
  a = adv[:, None]
  per_token = -np.minimum(ratio * a, np.clip(ratio, 1 - eps[0],
                                             1 + eps[1]) * a) * w
  return (per_token * mask).sum() / mask.sum()


@pytest.mark.parametrize("mode", ["none", "token", "sequence"])
def test_a_stale_batch_gets_the_reference_loss_and_metrics(mode):
  prox, behav, mask = stale_batch(seed=1)
  logp = prox + np.float32(0.1)
  adv = np.array([1.0, -0.5, 2.0], np.float32)
  total, denom, metrics = policy_loss_terms(
      logp, prox, adv, mask, behaviour_logp_BxT=behav, off_policy=mode,
      is_cap=2.0)
  np.testing.assert_allclose(float(total / denom), reference_loss(
      logp, prox, adv=adv, behav=behav, mask=mask, mode=mode, cap=2.0),
                             rtol=1e-5)
  gap = np.abs(prox - behav)[mask > 0].max()
  np.testing.assert_allclose(float(metrics["behaviour_logp_gap_max"]), gap,
                             rtol=1e-6)
  w, t = reference_weights(prox, behav, mask, mode if mode != "none"
                           else "token", 2.0)
  if mode == "none":
    w, t = np.ones_like(w), np.zeros_like(t)
  on = mask > 0
  np.testing.assert_allclose(float(metrics["is_weight_mean"]), w[on].mean(),
                             rtol=1e-5)
  np.testing.assert_allclose(float(metrics["is_truncated_fraction"]),
                             t[on].mean(), rtol=1e-6)
  # "none" anchors the ratio to the behaviour policy, the others to prox.
  anchor = behav if mode == "none" else prox
  np.testing.assert_allclose(float(metrics["ratio_mean"]), np.exp(
      np.float64(logp) - anchor)[on].mean(), rtol=1e-5)


def test_sequence_sum_norm_divides_by_a_configured_constant():
  prox, behav, mask = stale_batch()
  adv = np.ones(3, np.float32)
  _, denom, _ = policy_loss_terms(prox, prox, adv, mask,
                                  aggregation="sequence_sum_norm",
                                  max_len=1024)
  assert float(denom) == 3 * 1024  # Not 3 x the 6 columns of this step.


@pytest.mark.parametrize("field, value, message", [
    ("off_policy", "tokens", "off_policy"), ("is_cap", 0.5, "is_cap")])
def test_bad_settings_are_named(field, value, message):
  prox, behav, mask = stale_batch()
  with pytest.raises(ValueError, match=message):
    policy_loss_terms(prox, prox, np.ones(3, np.float32), mask,
                      behaviour_logp_BxT=behav, **{field: value})
  with pytest.raises(ValueError, match=field.replace("off_policy", "mode")
                     .replace("is_cap", "cap")):
    importance_weights(prox, behav, mask, **{
        ("mode" if field == "off_policy" else "cap"): value})
