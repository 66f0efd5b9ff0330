"""One Flax NNX decoder for the Llama / Qwen2 / Qwen3 / Qwen3-MoE family.

The Llama family (SmolLM2), Qwen2/2.5 (q/k/v bias), Qwen3 (q/k RMSNorm,
free head width) and Qwen3-MoE (Qwen3 with a mixture-of-experts MLP in
every layer, models/moe.py): GQA, RoPE with the checkpoint's own theta
(and Llama-3 scaling), tied or untied embeddings, float32 or bfloat16.

Layer parameters are stacked along a leading L axis and applied with
`jax.lax.scan`, so compile time does not grow with depth. Every parameter
carries `logical_axes` metadata; `models/sharding.py` maps those names to mesh
axes in one rules table. Shape letters: see models/config.py.

Positions are always explicit (never derived from pad tokens): a key at
position k is visible to a query at position q when k <= q. With a KV cache,
cache slot s holds the key/value of position s, so continuing a conversation
only writes the new positions.
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
from flax import nnx

from mgrpo_jax.models import lora, moe
from mgrpo_jax.models.config import ModelConfig


class KVCache(NamedTuple):
  """Keys and values of every layer: [L, B, G, S, Dh] each.

  Heads before slots: a decode step's attention is then a batched matrix
  product over (B, G) that reads each layer's keys and values in place.
  """
  k: jax.Array
  v: jax.Array

  @classmethod
  def zeros(cls, config: ModelConfig, batch: int, slots: int,
            dtype=jnp.float32) -> "KVCache":
    shape = (config.num_layers, batch, config.num_kv_heads, slots,
             config.head_dim)
    return cls(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))

  @property
  def slots(self) -> int:
    return self.k.shape[3]


def rope_inverse_frequencies(config: ModelConfig) -> jax.Array:
  """[Dh/2] inverse frequencies, with Llama-3 scaling when configured."""
  dh = config.head_dim
  inv = 1.0 / (config.rope_theta ** (jnp.arange(0, dh, 2, dtype=jnp.float32)
                                     / dh))
  if config.rope_llama3 is None:
    return inv
  factor, low, high, original = config.rope_llama3
  wavelen = 2 * jnp.pi / inv
  low_wavelen, high_wavelen = original / low, original / high
  scaled = jnp.where(wavelen > low_wavelen, inv / factor, inv)
  smooth = (original / wavelen - low) / (high - low)
  smoothed = (1 - smooth) * scaled / factor + smooth * scaled
  medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
  return jnp.where(medium, smoothed, scaled)


def apply_rope(x_BxTxNxDh: jax.Array, positions_BxT: jax.Array,
               inv_freq: jax.Array) -> jax.Array:
  """Rotary embedding in Hugging Face's half-split layout."""
  angles = positions_BxT[..., None].astype(jnp.float32) * inv_freq
  cos = jnp.cos(angles)[:, :, None, :]
  sin = jnp.sin(angles)[:, :, None, :]
  x = x_BxTxNxDh.astype(jnp.float32)
  x1, x2 = jnp.split(x, 2, axis=-1)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x_BxTxNxDh.dtype)


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
  """RMSNorm computed in float32, scaled by `weight` in the input dtype."""
  x32 = x.astype(jnp.float32)
  x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
  return weight.astype(x.dtype) * x32.astype(x.dtype)


def matmul(x: jax.Array, w: jax.Array, dt, out=None) -> jax.Array:
  """`x @ w` in the compute dtype `dt`, the result in `out` (None: `dt`).

  Weights stored in fewer bits than `dt` (a bfloat16 sampler copy under
  float32 compute, `sampling.Engine(weights_dtype=...)`) are read as they
  are: `x` is rounded to their dtype and the products accumulate in `out`.
  Casting the weights up instead costs XLA's CPU backend a full conversion
  of every weight each call (30 layer-sized dots at batch 8, AMD EPYC:
  5.9 ms float32, 4.1 ms this way, 13.4 ms casting the weights up).
  """
  if jnp.finfo(w.dtype).bits < jnp.finfo(dt).bits:
    return jnp.dot(x.astype(w.dtype), w, preferred_element_type=out or dt)
  if out is None:
    return x @ w.astype(dt)
  return jnp.dot(x, w.astype(dt), preferred_element_type=out)


def project(x: jax.Array, lp: dict[str, jax.Array], name: str, dt,
            out=None) -> jax.Array:
  """x @ lp[name], plus its low-rank adapter's x @ A @ B when the layer
  parameters carry one (`name@a`, `name@b`, scale folded into B:
  models/lora.py)."""
  y = matmul(x, lp[name], dt, out=out)
  if f"{name}@a" in lp:
    y = y + matmul(matmul(x, lp[f"{name}@a"], dt), lp[f"{name}@b"], dt,
                   out=out)
  return y


def project_qkv(c: ModelConfig, dt, lp: dict[str, jax.Array],
                h_BxTxD: jax.Array, positions_BxT: jax.Array,
                inv_freq: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """One layer's pre-norm and q/k/v (bias, q/k norm and RoPE applied).

  Returns q [B, T, G, R, Dh] (R = H / G query heads per key/value head) and
  k, v [B, T, G, Dh].
  """
  b, t, _ = h_BxTxD.shape
  x = rms_norm(h_BxTxD, lp["attn_norm"], c.rms_norm_eps)
  q = project(x, lp, "wq", dt)
  k = project(x, lp, "wk", dt)
  v = project(x, lp, "wv", dt)
  if c.attention_bias:
    q, k, v = (q + lp["bq"].astype(dt), k + lp["bk"].astype(dt),
               v + lp["bv"].astype(dt))
  q = q.reshape(b, t, c.num_heads, c.head_dim)
  k = k.reshape(b, t, c.num_kv_heads, c.head_dim)
  v = v.reshape(b, t, c.num_kv_heads, c.head_dim)
  if c.qk_norm:
    q = rms_norm(q, lp["q_norm"], c.rms_norm_eps)
    k = rms_norm(k, lp["k_norm"], c.rms_norm_eps)
  q = apply_rope(q, positions_BxT, inv_freq)
  k = apply_rope(k, positions_BxT, inv_freq)
  groups = c.num_heads // c.num_kv_heads
  return q.reshape(b, t, c.num_kv_heads, groups, c.head_dim), k, v


def attention(q_BxTxGxRxDh: jax.Array, keys_BxGxSxDh: jax.Array,
              values_BxGxSxDh: jax.Array, visible_BxTxS: jax.Array,
              dt) -> jax.Array:
  """Grouped-query attention [B, T, H * Dh]; key s is seen where visible.

  Keys and values come heads first, as the KV cache holds them. With a
  single query (a decode step) both products are written as multiply +
  reduce, which reads each layer's keys and values once, in place: on
  XLA's CPU backend that beat its batched dot (three query rows per head
  group) by 2x at batch 32, and the heads-first layout beat slots-first by
  15% (bench/decode_profile.py).
  """
  b, t, g, r, dh = q_BxTxGxRxDh.shape
  scale = dh ** -0.5
  keys, values = keys_BxGxSxDh.astype(dt), values_BxGxSxDh.astype(dt)
  if t == 1:
    q_BxGxRxDh = q_BxTxGxRxDh[:, 0].astype(jnp.float32)
    scores_BxGxRxS = jnp.sum(q_BxGxRxDh[:, :, :, None, :]
                             * keys.astype(jnp.float32)[:, :, None], axis=-1)
    scores_BxGxRxS = jnp.where(visible_BxTxS[:, 0, None, None, :],
                               scores_BxGxRxS * scale, -1e30)
    probs = jax.nn.softmax(scores_BxGxRxS, axis=-1).astype(dt)
    out = jnp.sum(probs[..., None] * values[:, :, None], axis=3)
    return out.reshape(b, 1, g * r * dh)
  scores = jnp.einsum("btgrd,bgsd->bgrts", q_BxTxGxRxDh, keys,
                      preferred_element_type=jnp.float32) * scale
  scores = jnp.where(visible_BxTxS[:, None, None], scores, -1e30)
  probs = jax.nn.softmax(scores, axis=-1).astype(dt)
  out = jnp.einsum("bgrts,bgsd->btgrd", probs, values)
  return out.reshape(b, t, g * r * dh)


class Routing(NamedTuple):
  """What a mixture-of-experts layer's router chose for its N tokens."""
  experts_NxK: jax.Array  # int32
  probs_NxE: jax.Array  # float32 router probabilities


def finish_layer(c: ModelConfig, dt, lp: dict[str, jax.Array],
                 h_BxTxD: jax.Array, attn_BxTxHDh: jax.Array, *,
                 routing: bool = False
                 ) -> jax.Array | tuple[jax.Array, Routing | None]:
  """Output projection, residual, and the SwiGLU MLP block of one layer
  (with experts: the mixture of experts, models/moe.py); `routing`: also
  the router's `Routing` (None for a dense layer)."""
  h = h_BxTxD + project(attn_BxTxHDh, lp, "wo", dt)
  x = rms_norm(h, lp["mlp_norm"], c.rms_norm_eps)
  chosen = None
  if c.num_experts:
    b, t, d = x.shape
    x_NxD = x.reshape(b * t, d)
    weights, experts, probs = moe.route(
        x_NxD, lp, c.experts_per_token, c.norm_topk_prob,
        lambda a, p, out: project(a, p, "router", dt, out=out))
    y = moe.experts_mlp(x_NxD, weights, experts, lp["expert_gate"],
                        lp["expert_up"], lp["expert_down"], dt,
                        moe.default_impl())
    out = h + y.reshape(b, t, d)
    chosen = Routing(experts, probs)
  else:
    gate = jax.nn.silu(project(x, lp, "w_gate", dt))
    out = h + project(gate * project(x, lp, "w_up", dt), lp, "w_down", dt)
  return (out, chosen) if routing else out


class RouterStats(NamedTuple):
  """A mixture of experts' routing over the tokens of a mask, per layer."""
  picks_LxE: jax.Array  # (token, expert) picks of each expert
  probs_LxE: jax.Array  # summed router probability of each expert
  tokens: jax.Array  # masked tokens (each layer routes them all)

  def load_balancing_loss(self) -> jax.Array:
    """Hugging Face's auxiliary loss over every layer's tokens together
    (`moe.load_balancing_loss`; K when balanced)."""
    n = jnp.maximum(self.tokens * self.picks_LxE.shape[0], 1.0)
    share_E = self.picks_LxE.sum(0) / n
    prob_E = self.probs_LxE.sum(0) / n
    return self.picks_LxE.shape[1] * jnp.sum(share_E * prob_E)

  def load_max(self) -> jax.Array:
    """The busiest expert's share of the picks, times E (1 = balanced)."""
    picks_E = self.picks_LxE.sum(0)
    return picks_E.max() * picks_E.shape[0] / jnp.maximum(picks_E.sum(), 1.0)


# A mixture-of-experts layer's MLP parameters (in place of w_gate, w_up,
# w_down): router [L, D, E], experts [L, E, D, Fe] x 2 and [L, E, Fe, D].
MOE_PARAMS = ("router", "expert_gate", "expert_up", "expert_down")


def layer_param_names(config: ModelConfig) -> tuple[str, ...]:
  """Names of the per-layer (stacked [L, ...]) parameters of a decoder."""
  names = ["attn_norm", "wq", "wk", "wv", "wo", "mlp_norm",
           *(MOE_PARAMS if config.num_experts else ("w_gate", "w_up",
                                                    "w_down"))]
  if config.attention_bias:
    names += ["bq", "bk", "bv"]
  if config.qk_norm:
    names += ["q_norm", "k_norm"]
  return tuple(names)


def _param(rngs: nnx.Rngs | None, shape, axes, dtype, *, std=None, ones=False):
  if ones:
    value = jnp.ones(shape, dtype)
  elif std is None:
    value = jnp.zeros(shape, dtype)
  else:
    value = (std * jax.random.normal(rngs.params(), shape)).astype(dtype)
  return nnx.Param(value, logical_axes=axes)


class Decoder(nnx.Module):
  """Decoder-only transformer (pre-norm, GQA, RoPE, SwiGLU)."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs,
               dtype=jnp.float32, param_dtype=jnp.float32,
               init_std: float = 0.02):
    c = config
    self.config = config
    self.dtype = dtype
    L, D, F = c.num_layers, c.hidden_size, c.intermediate_size
    qd, kvd = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    p = lambda shape, axes, **kw: _param(rngs, shape, axes, param_dtype, **kw)
    self.embed = p((c.vocab_size, D), ("vocab", "embed"), std=init_std)
    self.attn_norm = p((L, D), ("layers", "norm"), ones=True)
    self.wq = p((L, D, qd), ("layers", "embed", "heads"), std=init_std)
    self.wk = p((L, D, kvd), ("layers", "embed", "kv"), std=init_std)
    self.wv = p((L, D, kvd), ("layers", "embed", "kv"), std=init_std)
    self.wo = p((L, qd, D), ("layers", "heads", "embed"), std=init_std)
    if c.attention_bias:
      self.bq = p((L, qd), ("layers", "heads"))
      self.bk = p((L, kvd), ("layers", "kv"))
      self.bv = p((L, kvd), ("layers", "kv"))
    if c.qk_norm:
      self.q_norm = p((L, c.head_dim), ("layers", "norm"), ones=True)
      self.k_norm = p((L, c.head_dim), ("layers", "norm"), ones=True)
    self.mlp_norm = p((L, D), ("layers", "norm"), ones=True)
    if c.num_experts:
      E, Fe = c.num_experts, c.moe_intermediate_size
      self.router = p((L, D, E), ("layers", "embed", "experts"), std=init_std)
      self.expert_gate = p((L, E, D, Fe), ("layers", "experts", "embed",
                                            "mlp"), std=init_std)
      self.expert_up = p((L, E, D, Fe), ("layers", "experts", "embed", "mlp"),
                         std=init_std)
      self.expert_down = p((L, E, Fe, D), ("layers", "experts", "mlp",
                                            "embed"), std=init_std)
    else:
      self.w_gate = p((L, D, F), ("layers", "embed", "mlp"), std=init_std)
      self.w_up = p((L, D, F), ("layers", "embed", "mlp"), std=init_std)
      self.w_down = p((L, F, D), ("layers", "mlp", "embed"), std=init_std)
    self.final_norm = p((D,), ("norm",), ones=True)
    if not c.tie_word_embeddings:
      self.lm_head = p((D, c.vocab_size), ("embed", "vocab"), std=init_std)

  def _layer_params(self) -> dict[str, jax.Array]:
    return {n: getattr(self, n)[...] for n in layer_param_names(self.config)}

  def hidden_states(
      self,
      tokens_BxT: jax.Array,
      positions_BxT: jax.Array,
      cache: KVCache | None = None,
      *,
      remat: bool = False,
      router_mask_BxT: jax.Array | None = None,
      adapters: lora.Adapters | None = None,
  ) -> tuple[jax.Array, KVCache | None] | tuple[jax.Array, KVCache | None,
                                                 RouterStats]:
    """Final-normed hidden states [B, T, D] and the updated cache.

    Without a cache, attention runs over these T tokens (causal by position).
    With one, the T new keys/values are written at their positions and the
    queries attend over all S cache slots whose position is <= theirs; the
    caller keeps S (the cache window) near the live length. `remat`: under
    a gradient, each layer's activations are recomputed in the backward
    pass instead of kept (`jax.checkpoint` of the scanned layer: only the
    [B, T, D] input of every layer is saved, not its [B, H, T, T]
    attention probabilities); the values are the same.
    `router_mask_BxT` (mixture of experts only): also the `RouterStats`
    of the tokens where it is nonzero, as a third result. `adapters`:
    low-rank adapters added to their target matrices (models/lora.py).
    """
    c = self.config
    dt = self.dtype
    chex.assert_rank([tokens_BxT, positions_BxT], 2)
    chex.assert_equal_shape([tokens_BxT, positions_BxT])
    if router_mask_BxT is not None:
      chex.assert_equal_shape([tokens_BxT, router_mask_BxT])
    b, t = tokens_BxT.shape
    inv_freq = rope_inverse_frequencies(c)
    h = self.embed[...].astype(dt)[tokens_BxT]
    if cache is None:
      key_pos_BxS = positions_BxT
    else:
      key_pos_BxS = jnp.broadcast_to(jnp.arange(cache.slots), (b, cache.slots))
    visible_BxTxS = key_pos_BxS[:, None, :] <= positions_BxT[:, :, None]
    rows_B = jnp.arange(b)[:, None]

    def layer(carry, xs):
      h, cache_k, cache_v = carry
      lp, index = xs
      q, k, v = project_qkv(c, dt, lp, h, positions_BxT, inv_freq)
      if cache_k is None:
        keys, values = jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2)
      else:
        cache_k = cache_k.at[index, rows_B, :, positions_BxT].set(
            k.astype(cache_k.dtype), mode="drop")
        cache_v = cache_v.at[index, rows_B, :, positions_BxT].set(
            v.astype(cache_v.dtype), mode="drop")
        keys, values = cache_k[index], cache_v[index]
      attn = attention(q, keys, values, visible_BxTxS, dt)
      if router_mask_BxT is None:
        return (finish_layer(c, dt, lp, h, attn), cache_k, cache_v), None
      h, chosen = finish_layer(c, dt, lp, h, attn, routing=True)
      mask_N = router_mask_BxT.reshape(-1).astype(jnp.float32)
      picks_E = (jax.nn.one_hot(chosen.experts_NxK, c.num_experts).sum(1)
                 * mask_N[:, None]).sum(0)
      return (h, cache_k, cache_v), (picks_E, (chosen.probs_NxE
                                               * mask_N[:, None]).sum(0))

    ck, cv = (None, None) if cache is None else (cache.k, cache.v)
    if remat:
      layer = jax.checkpoint(layer, prevent_cse=False)
    if router_mask_BxT is not None and not c.num_experts:
      raise ValueError("Decoder.hidden_states: router_mask_BxT needs a "
                       "mixture-of-experts model (num_experts > 0).")
    (h, ck, cv), per_layer = jax.lax.scan(
        layer, (h, ck, cv), ({**self._layer_params(),
                              **lora.layer_adapters(adapters)},
                             jnp.arange(c.num_layers)))
    h = rms_norm(h, self.final_norm[...], c.rms_norm_eps)
    cache = None if cache is None else KVCache(ck, cv)
    if router_mask_BxT is None:
      return h, cache
    tokens = jnp.sum(router_mask_BxT.astype(jnp.float32))
    return h, cache, RouterStats(*per_layer, tokens)

  def logits(self, h_BxTxD: jax.Array) -> jax.Array:
    """Vocabulary logits [..., V] in float32 from final hidden states."""
    if self.config.tie_word_embeddings:
      w = self.embed[...].astype(self.dtype).T
    else:
      w = self.lm_head[...].astype(self.dtype)
    return jnp.dot(h_BxTxD, w, preferred_element_type=jnp.float32)

  def __call__(self, tokens_BxT: jax.Array,
               positions_BxT: jax.Array | None = None, *,
               remat: bool = False,
               adapters: lora.Adapters | None = None) -> jax.Array:
    """Logits [B, T, V] of a batch of sequences (training / scoring);
    `remat`, `adapters`: see `hidden_states`."""
    if positions_BxT is None:
      positions_BxT = jnp.broadcast_to(jnp.arange(tokens_BxT.shape[1]),
                                       tokens_BxT.shape)
    h, _ = self.hidden_states(tokens_BxT, positions_BxT, remat=remat,
                              adapters=adapters)
    return self.logits(h)

  def logits_and_routing(self, tokens_BxT: jax.Array,
                         router_mask_BxT: jax.Array, *,
                         remat: bool = False,
                         adapters: lora.Adapters | None = None
                         ) -> tuple[jax.Array, RouterStats]:
    """`__call__`'s logits and the `RouterStats` of the tokens where
    `router_mask_BxT` is nonzero (mixture of experts only)."""
    positions_BxT = jnp.broadcast_to(jnp.arange(tokens_BxT.shape[1]),
                                     tokens_BxT.shape)
    h, _, stats = self.hidden_states(tokens_BxT, positions_BxT, remat=remat,
                                     router_mask_BxT=router_mask_BxT,
                                     adapters=adapters)
    return self.logits(h), stats
