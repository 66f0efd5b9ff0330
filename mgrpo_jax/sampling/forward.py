"""The decoder's forward pass over a KV-cache window, with per-layer weights.

`models.Decoder.hidden_states` scans over weights stacked along L, which is
right for training but costly for decoding on CPU: XLA copies each layer's
weight slice out of the stack before every matmul, tripling the weight
memory traffic of a step whose cost is reading the weights. Here the layers
are unrolled over separate per-layer arrays (split once per weight update),
so each matmul reads its weights in place. The per-layer math is the
decoder's own (`project_qkv`, `attention`, `finish_layer`); tests check the
result against `Decoder.__call__`.

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
  """A cache window as per-layer arrays: L of [B, G, W, Dh] each."""
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
                  window: Window) -> tuple[jax.Array, Window]:
  """Final-normed hidden states [B, T, D] and the updated window.

  As `Decoder.hidden_states` with a cache: the T new keys/values are written
  at slot == position (out-of-window positions dropped), and each query
  attends over the window slots whose position is <= its own.
  """
  c = config
  dt = dtype
  b, t = tokens_BxT.shape
  slots = window.k[0].shape[2]
  inv_freq = rope_inverse_frequencies(c)
  h = weights.embed[tokens_BxT].astype(dt)
  visible_BxTxS = jnp.arange(slots)[None, None, :] <= positions_BxT[:, :, None]
  rows_B = jnp.arange(b)[:, None]
  new_k, new_v = [], []
  for lp, cache_k, cache_v in zip(weights.layers, window.k, window.v):
    q, k, v = project_qkv(c, dt, lp, h, positions_BxT, inv_freq)
    cache_k = cache_k.at[rows_B, :, positions_BxT].set(
        k.astype(cache_k.dtype), mode="drop")
    cache_v = cache_v.at[rows_B, :, positions_BxT].set(
        v.astype(cache_v.dtype), mode="drop")
    new_k.append(cache_k)
    new_v.append(cache_v)
    attn = attention(q, cache_k, cache_v, visible_BxTxS, dt)
    h = finish_layer(c, dt, lp, h, attn)
  h = rms_norm(h, weights.final_norm, c.rms_norm_eps)
  return h, Window(tuple(new_k), tuple(new_v))


def logits(dtype, weights: Weights, h_BxD: jax.Array) -> jax.Array:
  """Vocabulary logits [..., V] in float32, as `Decoder.logits`."""
  w = weights.embed.T if weights.lm_head is None else weights.lm_head
  return matmul(h_BxD, w, dtype, out=jnp.float32)
