"""The decoder's forward pass over a KV-cache window, with per-layer weights.

`models.Decoder.hidden_states` scans over weights stacked along L, which is
right for training but costly for decoding on CPU: XLA copies each layer's
weight slice out of the stack before every matmul, tripling the weight
memory traffic of a step whose cost is reading the weights. Here the layers
are unrolled over separate per-layer arrays (split once per weight update),
so each matmul reads its weights in place. The per-layer math is the
decoder's own (`project_qkv`, `attention`, `finish_layer`), except that
attention over many new tokens runs one row at a time
(`prefill_attention`) and decode over a prefix every row shares reads it
once (`cascade_attention`): the same sums in another order. Tests check
the result against `Decoder.__call__`.

Shape letters: B batch, T new tokens, W window slots, D width, V vocab, G
key/value heads, Dh head width, L layers.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.models.decoder import (Decoder, attention, finish_layer,
                                      layer_param_names, matmul, project_qkv,
                                      rms_norm, rope_inverse_frequencies)


class Weights(NamedTuple):
  """A decoder's parameters with the layer stack split into L dicts."""
  embed: jax.Array  # [V, D]
  final_norm: jax.Array  # [D]
  lm_head: jax.Array | None  # [D, V], None when tied to `embed`.
  layers: tuple[dict[str, jax.Array], ...]  # L dicts of per-layer arrays.


class Window(NamedTuple):
  """A cache window as per-layer arrays: L of [B, G, W, Dh] each (a shared
  prefix: L of [G, P, Dh])."""
  k: tuple[jax.Array, ...]
  v: tuple[jax.Array, ...]


def split_weights(model: Decoder, matrix_dtype=None) -> Weights:
  """Per-layer copies of the model's weights (jitted, once per update).

  `matrix_dtype` (None: as they are) is the dtype the matrices (embedding,
  projections, head) are copied in; norms and biases keep theirs.
  """
  c = model.config
  cast = ((lambda w: w) if matrix_dtype is None
          else lambda w: w.astype(matrix_dtype) if w.ndim >= 2 else w)
  stacked = {n: getattr(model, n)[...] for n in layer_param_names(c)}
  layers = tuple({n: cast(w[i]) for n, w in stacked.items()}
                 for i in range(c.num_layers))
  if not c.tie_word_embeddings:
    lm_head = cast(model.lm_head[...])
  elif matrix_dtype is not None:
    # Tied, rounded: a [D, V] copy. XLA's CPU backend runs a bfloat16 dot
    # with the transposed [V, D] embedding far slower (SmolLM2 batch 8:
    # 63 against 8 ms for float32, bench/decode_profile.py).
    lm_head = cast(model.embed[...].T)
  else:
    lm_head = None
  return Weights(cast(model.embed[...]), model.final_norm[...], lm_head,
                 layers)


def hidden_states(config: ModelConfig, dtype, weights: Weights,
                  tokens_BxT: jax.Array, positions_BxT: jax.Array,
                  window: Window, shared: Window | None = None
                  ) -> tuple[jax.Array, Window]:
  """Final-normed hidden states [B, T, D] and the updated window.

  As `Decoder.hidden_states` with a cache: the T new keys/values are written
  at slot == position (out-of-window positions dropped), and each query
  attends over the window slots whose position is <= its own. With
  `shared` (decode only, T = 1), the first P positions are that prefix,
  common to every row and seen by every query, and slot s of `window` holds
  position P + s.
  """
  c = config
  dt = dtype
  b, t = tokens_BxT.shape
  slots = window.k[0].shape[2]
  start = 0 if shared is None else shared.k[0].shape[1]
  if shared is not None and t != 1:
    raise ValueError(f"forward.hidden_states: a shared prefix needs one new "
                     f"token per row (decode), got T={t}.")
  inv_freq = rope_inverse_frequencies(c)
  h = weights.embed[tokens_BxT].astype(dt)
  slots_BxT = positions_BxT - start
  visible_BxTxS = jnp.arange(slots)[None, None, :] <= slots_BxT[:, :, None]
  rows_B = jnp.arange(b)[:, None]
  new_k, new_v = [], []
  for i, (lp, cache_k, cache_v) in enumerate(zip(weights.layers, window.k,
                                                 window.v)):
    q, k, v = project_qkv(c, dt, lp, h, positions_BxT, inv_freq)
    cache_k = cache_k.at[rows_B, :, slots_BxT].set(
        k.astype(cache_k.dtype), mode="drop")
    cache_v = cache_v.at[rows_B, :, slots_BxT].set(
        v.astype(cache_v.dtype), mode="drop")
    new_k.append(cache_k)
    new_v.append(cache_v)
    if shared is None and t > 1:
      attn = prefill_attention(q, cache_k, cache_v, visible_BxTxS, dt)
    elif shared is None:
      attn = attention(q, cache_k, cache_v, visible_BxTxS, dt)
    else:
      attn = cascade_attention(q, shared.k[i], shared.v[i], cache_k, cache_v,
                               visible_BxTxS, dt)
    h = finish_layer(c, dt, lp, h, attn)
  h = rms_norm(h, weights.final_norm, c.rms_norm_eps)
  return h, Window(tuple(new_k), tuple(new_v))


def prefill_attention(q_BxTxGxRxDh: jax.Array, keys_BxGxSxDh: jax.Array,
                      values_BxGxSxDh: jax.Array, visible_BxTxS: jax.Array,
                      dt) -> jax.Array:
  """`models.decoder.attention` for many queries per row, one row at a
  time (`lax.map`): a row's scores [G, R * T, S] stay in the CPU's cache
  through the mask, softmax and second product, where the whole batch's
  went through memory once per pass. A [16, 128]-token prefill over 512
  slots: 15 against 41 ms per layer on an AMD EPYC (Zen 5); one row: 1.5
  against 4.5 ms (the mask as an added bias, the division after the
  second product). [B, T, H * Dh]."""
  b, t, g, r, dh = q_BxTxGxRxDh.shape
  f32 = jnp.float32

  def one_row(row):
    q_TxGxRxDh, keys_GxSxDh, values_GxSxDh, visible_TxS = row
    q_GxQxDh = (q_TxGxRxDh.astype(f32).transpose(1, 2, 0, 3)
                .reshape(g, r * t, dh)) * dh ** -0.5
    scores_GxRxTxS = jnp.einsum(
        "gqd,gsd->gqs", q_GxQxDh, keys_GxSxDh.astype(f32)).reshape(
            g, r, t, -1) + jnp.where(visible_TxS, 0.0, -1e30)
    top = scores_GxRxTxS.max(-1, keepdims=True)
    weights_GxRxTxS = jnp.exp(scores_GxRxTxS - top)
    out_GxQxDh = jnp.einsum("gqs,gsd->gqd",
                            weights_GxRxTxS.reshape(g, r * t, -1),
                            values_GxSxDh.astype(f32))
    out_GxRxTxDh = (out_GxQxDh.reshape(g, r, t, dh)
                    / weights_GxRxTxS.sum(-1)[..., None])
    return out_GxRxTxDh.transpose(2, 0, 1, 3).reshape(t, g * r * dh)

  out_BxTxHDh = jax.lax.map(one_row, (q_BxTxGxRxDh, keys_BxGxSxDh,
                                      values_BxGxSxDh, visible_BxTxS))
  return out_BxTxHDh.astype(dt)


def cascade_attention(q_Bx1xGxRxDh: jax.Array, shared_k_GxPxDh: jax.Array,
                      shared_v_GxPxDh: jax.Array, keys_BxGxSxDh: jax.Array,
                      values_BxGxSxDh: jax.Array, visible_Bx1xS: jax.Array,
                      dt) -> jax.Array:
  """`models.decoder.attention` for one query per row over a prefix every
  row shares (seen whole, read once as a matrix product) and each row's
  own slots (seen where visible): one softmax over both parts, written as
  running max and sum so nothing is concatenated. [B, 1, H * Dh]."""
  b, _, g, r, dh = q_Bx1xGxRxDh.shape
  f32 = jnp.float32
  scale = dh ** -0.5
  q_BxGxRxDh = q_Bx1xGxRxDh[:, 0].astype(f32)
  own_BxGxRxS = jnp.sum(q_BxGxRxDh[:, :, :, None, :]
                        * keys_BxGxSxDh.astype(f32)[:, :, None], axis=-1)
  own_BxGxRxS = jnp.where(visible_Bx1xS[:, 0, None, None, :],
                          own_BxGxRxS * scale, -1e30)
  pre_BxGxRxP = jnp.einsum("bgrd,gpd->bgrp", q_BxGxRxDh,
                           shared_k_GxPxDh.astype(f32)) * scale
  top_BxGxR = jnp.maximum(own_BxGxRxS.max(-1), pre_BxGxRxP.max(-1))
  own_BxGxRxS = jnp.exp(own_BxGxRxS - top_BxGxR[..., None])
  pre_BxGxRxP = jnp.exp(pre_BxGxRxP - top_BxGxR[..., None])
  total_BxGxR = own_BxGxRxS.sum(-1) + pre_BxGxRxP.sum(-1)
  out = (jnp.sum(own_BxGxRxS[..., None]
                 * values_BxGxSxDh.astype(f32)[:, :, None], axis=3)
         + jnp.einsum("bgrp,gpd->bgrd", pre_BxGxRxP,
                      shared_v_GxPxDh.astype(f32)))
  out = out / total_BxGxR[..., None]
  return out.astype(dt).reshape(b, 1, g * r * dh)


def logits(dtype, weights: Weights, h_BxD: jax.Array) -> jax.Array:
  """Vocabulary logits [..., V] in float32, as `Decoder.logits`."""
  w = weights.embed.T if weights.lm_head is None else weights.lm_head
  return matmul(h_BxD, w, dtype, out=jnp.float32)
