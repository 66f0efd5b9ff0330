"""The mixture-of-experts MLP of Qwen3-MoE, without computing every expert.

Each token's router picks `experts_per_token` of `num_experts` SwiGLU
experts (softmax over all experts, top-k, optionally renormalised:
`norm_topk_prob`), and its output is their outputs weighted by those
probabilities, as in Hugging Face's `Qwen3MoeSparseMoeBlock`.

The experts' matmuls are grouped: the N x k (token, expert) pairs are
sorted by expert and each expert multiplies only its own rows
(`grouped_matmul`), in one of two ways:

* "blocks" (CPU, GPU): each expert's rows padded to a multiple of a block
  of b rows, and the blocks run one after another (`lax.map`), each one
  dot with its expert's weights read in place. Rows computed: N k plus at
  most E (b - 1) of padding; b = min(16, N k / E) rounded down to a power
  of two, so decode (few tokens) pads little.
* "ragged_dot" (`jax.lax.ragged_dot`): XLA's grouped matmul; on TPU its
  own kernel, on CPU it computes every expert for every row (a reference).

Shape letters as in models/config.py, and E experts, K experts per token,
Fe an expert's MLP width, M = N K (token, expert) rows.
"""

from __future__ import annotations

import chex
from typing import Any

import jax
import jax.numpy as jnp

IMPLS = ("blocks", "ragged_dot")


def default_impl() -> str:
  """"ragged_dot" on TPU, "blocks" elsewhere."""
  return "ragged_dot" if jax.default_backend() == "tpu" else "blocks"


def route(x_NxD: jax.Array, router: Any, k: int, normalize: bool,
          matmul) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(weights [N, K] float32, experts [N, K] int32, router probabilities
  [N, E] float32) of each token; `matmul(x, router, out)` gives the
  router's logits ([D, E] weights, or a layer's parameters with an
  adapter)."""
  logits_NxE = matmul(x_NxD, router, out=jnp.float32)
  probs_NxE = jax.nn.softmax(logits_NxE, axis=-1)
  weights_NxK, experts_NxK = jax.lax.top_k(probs_NxE, k)
  if normalize:
    weights_NxK = weights_NxK / jnp.sum(weights_NxK, axis=-1, keepdims=True)
  return weights_NxK, experts_NxK.astype(jnp.int32), probs_NxE


def _block_rows(rows: int, experts: int) -> int:
  b = 1
  while b * 2 <= min(16, rows // experts):
    b *= 2
  return b


def grouped_matmul(x_MxI: jax.Array, w_ExIxO: jax.Array, sizes_E: jax.Array,
                   dt, impl: str) -> jax.Array:
  """Rows of `x` sorted by group (the first sizes_E[0] rows are group 0's,
  ...) times their group's matrix: [M, O] in the compute dtype `dt`."""
  if impl == "ragged_dot":
    return jax.lax.ragged_dot(x_MxI.astype(dt), w_ExIxO.astype(dt), sizes_E,
                              preferred_element_type=dt)
  if impl != "blocks":
    raise ValueError(f"grouped_matmul impl={impl!r}: expected one of "
                     f"{list(IMPLS)}.")
  chex.assert_rank([x_MxI, w_ExIxO, sizes_E], [2, 3, 1])
  chex.assert_axis_dimension(w_ExIxO, 1, x_MxI.shape[1])
  chex.assert_axis_dimension(sizes_E, 0, w_ExIxO.shape[0])
  m, i = x_MxI.shape
  e = w_ExIxO.shape[0]
  b = _block_rows(m, e)
  blocks = -(-(m + e * (b - 1)) // b)
  # Group g's rows start at padded_start[g] in the padded layout.
  padded_E = -(-sizes_E // b) * b
  padded_start_E = jnp.cumsum(padded_E) - padded_E
  start_E = jnp.cumsum(sizes_E) - sizes_E
  group_M = jnp.repeat(jnp.arange(e), sizes_E, total_repeat_length=m)
  slot_M = padded_start_E[group_M] + jnp.arange(m) - start_E[group_M]
  x_PxI = jnp.zeros((blocks * b, i), x_MxI.dtype).at[slot_M].set(x_MxI)
  # Each block's group (blocks past the last group's: any, results unused).
  block_group = jnp.searchsorted(jnp.cumsum(padded_E),
                                 jnp.arange(blocks) * b, side="right")
  block_group = jnp.minimum(block_group, e - 1)

  def one(args):
    x_BxI, g = args
    w = jax.lax.dynamic_index_in_dim(w_ExIxO, g, keepdims=False)
    return jnp.dot(x_BxI.astype(dt), w.astype(dt), preferred_element_type=dt)

  out = jax.lax.map(one, (x_PxI.reshape(blocks, b, i), block_group))
  return out.reshape(blocks * b, -1)[slot_M]


def experts_mlp(x_NxD: jax.Array, weights_NxK: jax.Array,
                experts_NxK: jax.Array, gate_ExDxF: jax.Array,
                up_ExDxF: jax.Array, down_ExFxD: jax.Array, dt,
                impl: str) -> jax.Array:
  """Sum over each token's K experts of weight x SwiGLU expert output:
  [N, D] in `dt`."""
  chex.assert_rank([x_NxD, weights_NxK, experts_NxK], 2)
  chex.assert_equal_shape([weights_NxK, experts_NxK])
  chex.assert_equal_shape_prefix([x_NxD, experts_NxK], 1)
  chex.assert_rank([gate_ExDxF, up_ExDxF, down_ExFxD], 3)
  chex.assert_equal_shape([gate_ExDxF, up_ExDxF])
  chex.assert_axis_dimension(gate_ExDxF, 1, x_NxD.shape[1])
  n, k = experts_NxK.shape
  e = gate_ExDxF.shape[0]
  flat_M = experts_NxK.reshape(-1)
  order_M = jnp.argsort(flat_M, stable=True)
  sizes_E = jnp.bincount(flat_M, length=e).astype(jnp.int32)
  x_MxD = x_NxD[order_M // k]
  gate = grouped_matmul(x_MxD, gate_ExDxF, sizes_E, dt, impl)
  up = grouped_matmul(x_MxD, up_ExDxF, sizes_E, dt, impl)
  out_MxD = grouped_matmul(jax.nn.silu(gate) * up, down_ExFxD, sizes_E, dt,
                           impl)
  unsorted = jnp.zeros_like(out_MxD).at[order_M].set(out_MxD)
  return jnp.sum(unsorted.reshape(n, k, -1)
                 * weights_NxK.astype(dt)[..., None], axis=1)


def load_balancing_loss(probs_NxE: jax.Array, experts_NxK: jax.Array,
                        mask_N: jax.Array | None = None) -> jax.Array:
  """Switch-Transformer auxiliary loss, as Hugging Face's
  `load_balancing_loss_func`: E x sum over experts of (its picks per
  token) x (its mean router probability), over the tokens where `mask_N`
  (K when perfectly balanced)."""
  e = probs_NxE.shape[-1]
  mask = (jnp.ones(probs_NxE.shape[0], jnp.float32) if mask_N is None
          else mask_N.astype(jnp.float32))
  picks_NxE = jax.nn.one_hot(experts_NxK, e).sum(1)  # Picks per token.
  total = jnp.maximum(mask.sum(), 1.0)
  share_E = (picks_NxE * mask[:, None]).sum(0) / total
  prob_E = (probs_NxE * mask[:, None]).sum(0) / total
  return e * jnp.sum(share_E * prob_E)


def expert_load(experts_NxK: jax.Array, num_experts: int,
                mask_N: jax.Array | None = None) -> jax.Array:
  """Share of the (token, expert) picks each expert got: [E], sums to 1."""
  mask = (jnp.ones(experts_NxK.shape[0], jnp.float32) if mask_N is None
          else mask_N.astype(jnp.float32))
  counts = (jax.nn.one_hot(experts_NxK, num_experts).sum(1)
            * mask[:, None]).sum(0)
  return counts / jnp.maximum(counts.sum(), 1.0)
