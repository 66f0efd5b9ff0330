"""Choosing the next token from logits: greedy, temperature, top-k, top-p.

Pure functions of arrays (B batch, V vocab), safe inside jit / while_loop.
The sampling settings are traced scalars, so changing them never recompiles,
and the restrictions are skipped with `lax.cond` when unset (no full-vocab
work for top-k = 0 or top-p = 1). Top-k and top-p find their threshold by
bisection on the float bit patterns (32 masked counts / sums over V) instead
of sorting the vocabulary; both keep ties with the threshold token.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

_BISECTION_STEPS = 32  # Enough to pin any int32 threshold exactly.
_BLOCK = 256  # Vocabulary block width of the two-level inverse-CDF draw.


def _sortable_bits(x: jax.Array) -> jax.Array:
  """int32 keys with the same order as the float32 values `x`."""
  bits = lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32)
  return jnp.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


def _largest_threshold(keys_BxV: jax.Array, predicate) -> jax.Array:
  """Per row, the largest int32 t with predicate(keys >= t) true: [B, 1].

  `predicate(mask_BxV) -> bool[B]` must be true for the row minimum and
  monotone (true for every t below a true one).
  """
  lo = jnp.min(keys_BxV, axis=-1)  # predicate true here.
  hi = jnp.max(keys_BxV, axis=-1)  # The answer lies in [lo, hi].

  def body(_, bounds):
    lo, hi = bounds
    mid = (lo >> 1) + (hi >> 1) + ((lo | hi) & 1)  # ceil((lo + hi) / 2).
    ok = predicate(keys_BxV >= mid[:, None])
    return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid - 1)

  lo, _ = lax.fori_loop(0, _BISECTION_STEPS, body, (lo, hi))
  return lo[:, None]


def top_k_mask(logits_BxV: jax.Array, k: jax.Array) -> jax.Array:
  """bool [B, V]: the k highest logits of each row (ties with the k-th kept).

  k is a traced int scalar >= 1.
  """
  keys = _sortable_bits(logits_BxV)
  threshold = _largest_threshold(
      keys, lambda m: jnp.sum(m, axis=-1, dtype=jnp.int32) >= k)
  return keys >= threshold


def top_p_mask(probs_BxV: jax.Array, p: jax.Array) -> jax.Array:
  """bool [B, V]: the nucleus, the fewest most-likely tokens with mass >= p.

  `probs_BxV` are non-negative, not necessarily normalised (masked tokens
  0); p is a traced float scalar in (0, 1].
  """
  probs = probs_BxV.astype(jnp.float32)
  need_B = p * jnp.sum(probs, axis=-1)
  keys = _sortable_bits(probs)
  threshold = _largest_threshold(
      keys, lambda m: jnp.sum(jnp.where(m, probs, 0.0), axis=-1) >= need_B)
  return keys >= threshold


def _inverse_cdf(probs_BxV: jax.Array, key: jax.Array,
                 draw_B: jax.Array) -> jax.Array:
  """Token ids [B] drawn with probability proportional to `probs_BxV` >= 0.

  Row b draws its uniform from fold_in(key, draw_B[b]), so its token does
  not depend on how many rows the batch holds or where the row sits in it. One uniform per row and a two-level
  search (cumulative mass over blocks of the vocabulary, then inside the
  chosen block) avoid both a full-vocab cumsum and full-vocab Gumbel draws.
  """
  b, v = probs_BxV.shape
  c = min(_BLOCK, v)
  nb = -(-v // c)
  probs = jnp.pad(probs_BxV, ((0, 0), (0, nb * c - v))).reshape(b, nb, c)
  block_cdf = jnp.cumsum(jnp.sum(probs, axis=-1), axis=-1)  # [B, nb]
  # u in (0, total]: the first block (and token) whose cumulative mass
  # reaches u has positive mass.
  keys_B = jax.vmap(lambda r: jax.random.fold_in(key, r))(draw_B)
  uniform_B = jax.vmap(lambda k: jax.random.uniform(k, ()))(keys_B)
  u = (1.0 - uniform_B) * block_cdf[:, -1]
  block = jnp.minimum(jnp.sum(block_cdf < u[:, None], axis=-1), nb - 1)
  before = jnp.where(block > 0, jnp.take_along_axis(
      block_cdf, jnp.maximum(block - 1, 0)[:, None], axis=-1)[:, 0], 0.0)
  inside_BxC = jnp.take_along_axis(probs, block[:, None, None], axis=1)[:, 0]
  cdf = jnp.cumsum(inside_BxC, axis=-1)
  index = jnp.sum(cdf < (u - before)[:, None], axis=-1)
  # Rounding can point past the block's last token with mass; stay on it.
  last = jnp.max(jnp.where(inside_BxC > 0, jnp.arange(c), 0), axis=-1)
  return (block * c + jnp.minimum(index, last)).astype(jnp.int32)


def sample_tokens(
    logits_BxV: jax.Array,
    key: jax.Array,
    temperature: jax.Array | float,
    top_k: jax.Array | int = 0,
    top_p: jax.Array | float = 1.0,
    draw_B: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Next tokens [B] (int32) and their log-probs [B] (float32).

  temperature == 0 is greedy: argmax, log-prob under log_softmax(logits).
  Otherwise a token is drawn from softmax(logits / temperature), restricted
  to the top-k (k > 0) and then to the nucleus of mass top_p (< 1); its
  log-prob is log_softmax(logits / temperature) at that token, i.e. under
  the temperature-scaled distribution before the top-k / top-p truncation.
  Row b draws with fold_in(key, draw_B[b]); draw_B defaults to arange(B), and
  a caller that moves rows between batches passes their stable ids.
  """
  logits = logits_BxV.astype(jnp.float32)
  if draw_B is None:
    draw_B = jnp.arange(logits.shape[0])
  v = logits.shape[-1]
  temperature = jnp.asarray(temperature, jnp.float32)
  top_k = jnp.asarray(top_k, jnp.int32)
  top_p = jnp.asarray(top_p, jnp.float32)

  def greedy(_):
    tokens_B = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return tokens_B, logits, jax.nn.logsumexp(logits, axis=-1)

  def sampled(_):
    scaled = logits / temperature
    top = jnp.max(scaled, axis=-1, keepdims=True)
    probs = jnp.exp(scaled - top)
    log_total_B = top[:, 0] + jnp.log(jnp.sum(probs, axis=-1))
    kept = lax.cond((top_k > 0) & (top_k < v),
                    lambda pr: jnp.where(top_k_mask(scaled, top_k), pr, 0.0),
                    lambda pr: pr, probs)
    kept = lax.cond(top_p < 1.0,
                    lambda pr: jnp.where(top_p_mask(pr, top_p), pr, 0.0),
                    lambda pr: pr, kept)
    return _inverse_cdf(kept, key, draw_B), scaled, log_total_B

  tokens_B, scaled, log_total_B = lax.cond(temperature == 0, greedy, sampled,
                                           None)
  chosen_B = jnp.take_along_axis(scaled, tokens_B[:, None], axis=-1)[:, 0]
  return tokens_B, chosen_B - log_total_B
