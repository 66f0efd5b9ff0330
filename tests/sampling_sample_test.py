"""Tests of token selection: greedy, temperature, top-k, top-p, log-probs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.sampling.sample import sample_tokens, top_k_mask, top_p_mask
from model_test_utils import EPS_F32, FLOAT32_FACTOR, float32_tolerance

_sample = jax.jit(sample_tokens)
_V = 10  # Vocabulary of the distribution tests (one compiled shape).
_N = 20000  # Draws per distribution test.


def _logits(seed=0):
  return jax.random.normal(jax.random.key(seed), (_V,)) * 2.0


def _draw(logits_V, temperature, top_k=0, top_p=1.0, n=_N, seed=0):
  """n independent draws: n identical rows, one key (rows fold it in)."""
  logits_BxV = jnp.broadcast_to(logits_V, (n, logits_V.shape[0]))
  return _sample(logits_BxV, jax.random.key(seed), temperature, top_k, top_p)


def test_greedy_is_argmax_with_raw_log_softmax():
  logits = jax.random.normal(jax.random.key(1), (8, 50))
  tokens, logprobs = _sample(logits, jax.random.key(0), 0.0, 0, 1.0)
  np.testing.assert_array_equal(tokens, jnp.argmax(logits, -1))
  want = jnp.max(jax.nn.log_softmax(logits, -1), -1)
  # Two formulas, reductions over V ordered per CPU: float32 rounding of the
  # logits' magnitude (measured <= 1.2 eps * max|logit|).
  np.testing.assert_allclose(
      logprobs, want, rtol=FLOAT32_FACTOR * EPS_F32,
      atol=float32_tolerance(np.abs(logits).max()))


def test_temperature_alone_samples_the_softmax_distribution():
  logits = _logits()
  temperature = 0.7
  tokens, logprobs = _draw(logits, temperature)
  freq = np.bincount(np.asarray(tokens), minlength=_V) / _N
  want = np.asarray(jax.nn.softmax(logits / temperature))
  np.testing.assert_allclose(freq, want, atol=0.02)
  # The log-prob is log_softmax(logits / T) at the sampled token, up to
  # float32 rounding at the scaled logits' magnitude (measured <= 1.5 eps
  # * max|logits / T|; a 1% temperature error moves it by up to 0.08).
  np.testing.assert_allclose(
      logprobs, np.log(want)[np.asarray(tokens)],
      rtol=FLOAT32_FACTOR * EPS_F32,
      atol=float32_tolerance(np.abs(logits / temperature).max()))


def test_different_keys_give_different_tokens_same_key_same_tokens():
  logits = jnp.zeros((8, 50))
  a, _ = _sample(logits, jax.random.key(0), 1.0, 0, 1.0)
  b, _ = _sample(logits, jax.random.key(0), 1.0, 0, 1.0)
  c, _ = _sample(logits, jax.random.key(1), 1.0, 0, 1.0)
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)


def test_row_draws_do_not_depend_on_batch_size():
  logits = jax.random.normal(jax.random.key(3), (8, 50))
  small, _ = _sample(logits[:3], jax.random.key(5), 1.0, 0, 1.0)
  large, _ = _sample(logits, jax.random.key(5), 1.0, 0, 1.0)
  np.testing.assert_array_equal(small, large[:3])


def test_top_k_restricts_to_the_k_most_likely_and_renormalises():
  logits = _logits(seed=2)
  k = 3
  tokens, _ = _draw(logits, 1.0, top_k=k)
  top = np.argsort(-np.asarray(logits))[:k]
  freq = np.bincount(np.asarray(tokens), minlength=_V) / _N
  want = np.zeros(_V)
  want[top] = np.asarray(jax.nn.softmax(logits[top]))
  np.testing.assert_allclose(freq, want, atol=0.02)


def test_top_p_restricts_to_the_nucleus():
  logits = _logits(seed=4)
  probs = np.asarray(jax.nn.softmax(logits))
  order = np.argsort(-probs)
  top_p = 0.6
  size = int(np.searchsorted(np.cumsum(probs[order]), top_p) + 1)
  nucleus = set(order[:size].tolist())
  tokens, _ = _draw(logits, 1.0, top_p=top_p)
  assert set(np.asarray(tokens).tolist()) == nucleus


def test_masks_match_sorting_references():
  logits = jax.random.normal(jax.random.key(7), (6, 300))
  keep = top_k_mask(logits, jnp.int32(17))
  ref = logits >= jnp.sort(logits, -1)[:, -17][:, None]
  np.testing.assert_array_equal(keep, ref)
  probs = jax.nn.softmax(logits * 3)
  keep = np.asarray(top_p_mask(probs, jnp.float32(0.8)))
  for row, p in zip(keep, np.asarray(probs)):
    sorted_p = np.sort(p)[::-1]
    size = int(np.searchsorted(np.cumsum(sorted_p), 0.8) + 1)
    assert row.sum() == size
    assert p[row].min() >= p[~row].max()


@pytest.mark.parametrize("k", [0, _V])
def test_no_restriction_when_k_is_zero_or_covers_the_vocab(k):
  logits = jnp.zeros((_V,))
  tokens, _ = _draw(logits, 1.0, top_k=k, top_p=1.0)
  assert len(set(np.asarray(tokens).tolist())) == _V
