"""Tests of the sampler's attention pieces: prefill and cascade (shared prefix)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.models.decoder import attention
from mgrpo_jax.sampling.forward import cascade_attention, prefill_attention


def _inputs(b=3, g=2, r=3, dh=16, p=8, s=12, seed=0, dtype=jnp.float32):
  keys = jax.random.split(jax.random.key(seed), 6)
  q = jax.random.normal(keys[0], (b, 1, g, r, dh), dtype) * 3
  shared_k = jax.random.normal(keys[1], (g, p, dh), dtype)
  shared_v = jax.random.normal(keys[2], (g, p, dh), dtype)
  own_k = jax.random.normal(keys[3], (b, g, s, dh), dtype)
  own_v = jax.random.normal(keys[4], (b, g, s, dh), dtype)
  # Row b sees its first 4 + 3b own slots (the rest lie past its position).
  visible = jnp.arange(s)[None, None, :] < (4 + 3 * jnp.arange(b))[:, None,
                                                                  None]
  return q, shared_k, shared_v, own_k, own_v, visible


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_cascade_attention_equals_attention_over_the_whole_window(dtype):
  q, shared_k, shared_v, own_k, own_v, visible = _inputs(dtype=dtype)
  b, p = q.shape[0], shared_k.shape[1]
  # The reference: every row holds its own copy of the prefix.
  whole = lambda shared, own: jnp.concatenate(
      [jnp.broadcast_to(shared, (b, *shared.shape)), own], axis=2)
  want = attention(q, whole(shared_k, own_k), whole(shared_v, own_v),
                   jnp.concatenate([jnp.ones((b, 1, p), bool), visible],
                                   axis=2), dtype)
  got = cascade_attention(q, shared_k, shared_v, own_k, own_v, visible,
                          dtype)
  assert got.shape == want.shape == (b, 1, 2 * 3 * 16)
  assert got.dtype == want.dtype
  # float32: one softmax either way, summed in another order (a few eps of
  # outputs ~1). bfloat16: the reference rounds its probabilities to
  # bfloat16 before the sum, the cascade only its output (8 mantissa bits).
  tol = 1e-5 if dtype == jnp.float32 else 2e-2
  np.testing.assert_allclose(np.asarray(got, np.float32),
                             np.asarray(want, np.float32), atol=tol,
                             rtol=tol)


def test_cascade_attention_uses_the_prefix_and_only_visible_own_slots():
  q, shared_k, shared_v, own_k, own_v, visible = _inputs()
  base = cascade_attention(q, shared_k, shared_v, own_k, own_v, visible,
                           jnp.float32)
  # Changing a slot no row sees changes nothing; changing the shared
  # prefix changes every row.
  hidden = own_v.at[0, :, 5:].set(100.0)  # row 0 sees slots 0-3 only
  same = cascade_attention(q, shared_k, shared_v, own_k, hidden, visible,
                           jnp.float32)
  np.testing.assert_array_equal(np.asarray(same), np.asarray(base))
  moved = cascade_attention(q, shared_k, shared_v + 1.0, own_k, own_v,
                            visible, jnp.float32)
  assert np.all(np.abs(np.asarray(moved - base)).max(axis=-1) > 1e-3)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_prefill_attention_equals_attention(dtype):
  b, t, g, r, dh, s = 3, 5, 2, 3, 16, 12
  keys = jax.random.split(jax.random.key(1), 3)
  q = jax.random.normal(keys[0], (b, t, g, r, dh), dtype) * 3
  k = jax.random.normal(keys[1], (b, g, s, dh), dtype)
  v = jax.random.normal(keys[2], (b, g, s, dh), dtype)
  # Row b's new tokens sit at positions 2b .. 2b + t - 1 (causal).
  positions_BxT = 2 * jnp.arange(b)[:, None] + jnp.arange(t)[None]
  visible = jnp.arange(s)[None, None, :] <= positions_BxT[:, :, None]
  want = attention(q, k, v, visible, dtype)
  got = prefill_attention(q, k, v, visible, dtype)
  assert got.shape == want.shape == (b, t, g * r * dh)
  assert got.dtype == want.dtype
  # float32: the same sums in another order; bfloat16: the reference rounds
  # its probabilities to bfloat16, this only its output.
  tol = 1e-5 if dtype == jnp.float32 else 2e-2
  np.testing.assert_allclose(np.asarray(got, np.float32),
                             np.asarray(want, np.float32), atol=tol,
                             rtol=tol)
  # A key no query sees (past every position) changes nothing.
  hidden = v.at[:, :, s - 1].set(1e3)
  np.testing.assert_array_equal(
      np.asarray(prefill_attention(q, k, hidden, visible, dtype)),
      np.asarray(got))
