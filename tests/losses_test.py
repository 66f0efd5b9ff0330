"""clipped_policy_loss against a NumPy reference; gradients; dtypes; errors."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from mgrpo_jax import LOSS_AGGREGATIONS, clipped_policy_loss, policy_loss_terms
from model_test_utils import float32_tolerance

AGGREGATIONS = ["token_mean", "sequence_mean", "sequence_sum_norm"]


def ref_token_loss(logp, old, adv, ref, beta, eps_low, eps_high):
  ratio = np.exp(logp - old)
  a = adv[:, None]
  loss = -np.minimum(ratio * a, np.clip(ratio, 1 - eps_low, 1 + eps_high) * a)
  if ref is not None:
    r = ref - logp
    loss = loss + beta * (np.exp(r) - r - 1)
  return loss


def ref_aggregate(loss, mask, aggregation):
  if aggregation == "token_mean":
    return (loss * mask).sum() / max(mask.sum(), 1)
  if aggregation == "sequence_mean":
    per_seq = [(l * m).sum() / m.sum() for l, m in zip(loss, mask) if m.sum()]
    return np.mean(per_seq) if per_seq else 0.0
  return (loss * mask).sum() / loss.size


def ref_grad(logp, old, adv, mask, ref, beta, eps_low, eps_high, aggregation):
  """d loss / d logp, by hand."""
  ratio = np.exp(logp - old)
  a = adv[:, None] * np.ones_like(logp)
  clipped = np.clip(ratio, 1 - eps_low, 1 + eps_high)
  unclipped_wins = ratio * a <= clipped * a
  g = np.where(unclipped_wins, -a * ratio, 0.0)
  if ref is not None:
    g = g + beta * (1 - np.exp(ref - logp))
  if aggregation == "token_mean":
    return g * mask / mask.sum()
  if aggregation == "sequence_mean":
    count = mask.sum(1, keepdims=True)
    rows = (count[:, 0] > 0).sum()
    return g * mask / np.maximum(count, 1) / rows
  return g * mask / g.size


def random_batch(seed, b=6, t=9, empty_row=True):
  rng = np.random.default_rng(seed)
  old = rng.normal(-2.0, 0.5, (b, t)).astype(np.float32)
  logp = (old + rng.normal(0, 0.4, (b, t))).astype(np.float32)
  ref = (old + rng.normal(0, 0.3, (b, t))).astype(np.float32)
  adv = rng.normal(0, 1, b).astype(np.float32)
  mask = (rng.random((b, t)) > 0.3).astype(np.float32)
  if empty_row:
    mask[1] = 0.0
  return logp, old, adv, mask, ref


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("beta", [0.0, 0.05])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_value_and_grad_match_reference(aggregation, beta, seed):
  logp, old, adv, mask, ref = random_batch(seed)
  ref_arg = ref if beta > 0 else None
  kwargs = dict(eps_low=0.2, eps_high=0.28, beta=beta, aggregation=aggregation)

  def loss_fn(lp):
    return clipped_policy_loss(lp, old, adv, mask, ref_logp_BxT=ref_arg,
                               **kwargs)[0]

  loss, grad = jax.value_and_grad(loss_fn)(jnp.asarray(logp))
  token = ref_token_loss(logp.astype(np.float64), old, adv, ref_arg, beta,
                         0.2, 0.28)
  np.testing.assert_allclose(loss, ref_aggregate(token, mask, aggregation),
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
      grad, ref_grad(logp.astype(np.float64), old, adv, mask, ref_arg, beta,
                     0.2, 0.28, aggregation), rtol=1e-4, atol=1e-6)


def test_finite_difference_gradient():
  jax.config.update("jax_enable_x64", True)
  try:
    logp, old, adv, mask, ref = (x.astype(np.float64) for x in random_batch(7))

    def loss_fn(lp):
      return clipped_policy_loss(lp, old, adv, mask, ref_logp_BxT=ref,
                                 beta=0.1)[0]

    check_grads(loss_fn, (jnp.asarray(logp),), order=2, modes=("rev",),
                atol=1e-4, rtol=1e-4)
  finally:
    jax.config.update("jax_enable_x64", False)


def test_metrics():
  # ratio = e^0.5 = 1.65 > 1.28 with A > 0 (clipped), ratio 1 elsewhere.
  logp = jnp.array([[0.5, 0.0], [0.0, 0.0]])
  old = jnp.zeros((2, 2))
  mask = jnp.array([[1.0, 1.0], [1.0, 0.0]])
  _, m = clipped_policy_loss(logp, old, jnp.array([1.0, -1.0]), mask)
  np.testing.assert_allclose(m["clip_fraction"], 1 / 3, rtol=1e-6)
  np.testing.assert_allclose(m["approx_kl"], (np.exp(0.5) - 1 - 0.5) / 3,
                             rtol=1e-6)
  np.testing.assert_allclose(m["ratio_mean"], (np.exp(0.5) + 2) / 3, rtol=1e-6)
  assert m["num_tokens"] == 3
  _, m = clipped_policy_loss(logp, old, jnp.array([1.0, -1.0]), mask,
                             ref_logp_BxT=old, beta=0.5)
  np.testing.assert_allclose(m["ref_kl"], (np.exp(-0.5) + 0.5 - 1) / 3,
                             rtol=1e-6)


def test_asymmetric_clip_boundaries():
  adv = jnp.array([1.0, -1.0])
  old = jnp.zeros((2, 1))
  mask = jnp.ones((2, 1))

  def grad_at(ratio):
    lp = jnp.log(jnp.full((2, 1), ratio))
    return jax.grad(lambda x: clipped_policy_loss(x, old, adv, mask)[0])(lp)

  # A > 0: gradient until ratio passes 1 + eps_high = 1.28, zero beyond.
  assert grad_at(1.25)[0, 0] != 0 and grad_at(1.31)[0, 0] == 0
  # A < 0: gradient until ratio drops below 1 - eps_low = 0.8, zero below.
  assert grad_at(0.82)[1, 0] != 0 and grad_at(0.78)[1, 0] == 0
  # The other sides are never clipped.
  assert grad_at(0.5)[0, 0] != 0 and grad_at(2.0)[1, 0] != 0


def test_bf16_inputs_compute_in_f32():
  logp, old, adv, mask, _ = random_batch(3)
  bf = [jnp.asarray(x, jnp.bfloat16) for x in (logp, old, adv, mask)]
  loss, metrics = clipped_policy_loss(*bf)
  assert loss.dtype == jnp.float32
  rounded = [np.asarray(x, np.float64) for x in bf]
  want = ref_aggregate(ref_token_loss(*rounded[:3], None, 0.0, 0.2, 0.28),
                       rounded[3], "token_mean")
  np.testing.assert_allclose(loss, want, rtol=1e-5)
  grad = jax.grad(lambda x: clipped_policy_loss(x, *bf[1:])[0])(bf[0])
  assert grad.dtype == jnp.bfloat16 and np.all(np.isfinite(np.asarray(grad, np.float32)))


def test_garbage_in_padding_does_not_leak():
  logp, old, adv, mask, _ = random_batch(4)
  dirty = np.where(mask > 0, logp, -np.inf).astype(np.float32)
  dirty_old = np.where(mask > 0, old, np.nan).astype(np.float32)
  loss_fn = lambda x: clipped_policy_loss(x, dirty_old, adv, mask)[0]
  clean_fn = lambda x: clipped_policy_loss(x, old, adv, mask)[0]
  np.testing.assert_allclose(loss_fn(dirty), clean_fn(logp), rtol=1e-6)
  assert np.all(np.isfinite(jax.grad(loss_fn)(jnp.asarray(dirty))))


def test_terms_sum_over_microbatches_equals_full_batch():
  logp, old, adv, mask, _ = random_batch(5, b=8, empty_row=False)
  full, _ = clipped_policy_loss(logp, old, adv, mask)
  parts = [policy_loss_terms(logp[i:i + 2], old[i:i + 2], adv[i:i + 2],
                             mask[i:i + 2])[:2] for i in range(0, 8, 2)]
  total = sum(p[0] for p in parts) / sum(p[1] for p in parts)
  # Four partial sums vs one sum: another rounding order. Advantages of
  # both signs cancel, so the error scales with the mean |token loss|, not
  # with |loss| (measured <= 2.4 eps * that over 40 seeds, where rtol=1e-6
  # of |loss| fails by up to 92x).
  scale = (np.abs(ref_token_loss(logp, old, adv, None, 0.0, 0.2, 0.28)) *
           mask).sum() / mask.sum()
  np.testing.assert_allclose(total, full, rtol=0,
                             atol=float32_tolerance(scale))


def test_compiles_once_across_masks_and_values():
  traces = []

  @jax.jit
  def f(logp, old, adv, mask):
    traces.append(1)
    return clipped_policy_loss(logp, old, adv, mask,
                               aggregation="sequence_mean")

  for seed in range(5):
    f(*random_batch(seed)[:4])
  assert len(traces) == 1


def test_registry_lists_the_three_aggregations():
  assert set(AGGREGATIONS) <= set(LOSS_AGGREGATIONS.names())


ERRORS = [
    (dict(logp_BxT=np.zeros(3, np.float32)), "'logp_BxT' must be a 2-D"),
    (dict(old_logp_BxT=np.zeros((2, 4), np.float32)),
     "'old_logp_BxT' must be of shape (2, 3)"),
    (dict(adv_B=np.zeros(3, np.float32)), "'adv_B' must be of shape (2,)"),
    (dict(adv_B=np.zeros(2, np.int32)), "'adv_B' must be of floating"),
    (dict(mask_BxT=np.ones((3, 2))), "'mask_BxT' must be of shape (2, 3)"),
    (dict(logp_BxT=np.zeros((2, 3), np.int32)), "'logp_BxT' must be of floating"),
    (dict(aggregation="mean"), "unknown loss aggregation aggregation='mean'"),
    (dict(eps_low=1.5), "'eps_low' must be a finite number in [0.0, 1.0]"),
    (dict(eps_high=-0.1), "'eps_high' must be a finite number >= 0.0"),
    (dict(beta=0.1), "'ref_logp_BxT' must be given when beta > 0"),
    (dict(ref_logp_BxT=np.zeros((2, 2), np.float32)),
     "'ref_logp_BxT' must be of shape (2, 3)"),
]


@pytest.mark.parametrize("kwargs, message", ERRORS)
def test_bad_input_is_named(kwargs, message):
  args = dict(logp_BxT=np.zeros((2, 3), np.float32),
              old_logp_BxT=np.zeros((2, 3), np.float32),
              adv_B=np.ones(2, np.float32), mask_BxT=np.ones((2, 3)))
  args.update(kwargs)
  positional = [args.pop(k) for k in ("logp_BxT", "old_logp_BxT", "adv_B",
                                      "mask_BxT")]
  with pytest.raises(ValueError, match=re.escape(message)):
    clipped_policy_loss(*positional, **args)
