"""Pure, jit-ready prefill and multi-step decode over a shared KV cache.

Shape letters: B batch rows (padded to a bucket), T new tokens per row
(padded to a bucket), N decode steps per chunk, W cache window (slots), V
vocab, K stop ids (padded), L layers, R rows of the engine's cache.

The engine's cache holds one conversation per row, [L, R, G, S, Dh]. Each
call gathers the rows of its batch and only the first W slots (a bucketed
window just long enough for the live positions), runs on that window, and
scatters it back, so attention never scans the whole preallocated cache.
Row indices >= R mark padding rows: their gather is clamped and their
scatter dropped. Slot s holds position s; a query at position p sees slots
<= p, all of which hold this conversation's tokens, so whatever lies beyond
a row's live length is never read.

Cascade decode: when every row of a decode call starts with the same P
tokens (a system prompt), the call gathers only slots [P, W) of each row
and reads slots [0, P) once, from one row (`forward.hidden_states`'s
`shared`): at batch 32 the keys and values read per step are most of a
step's memory traffic, and a system prompt is a large part of them.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.models.decoder import KVCache
from mgrpo_jax.runtime.buckets import power_of_two
from mgrpo_jax.sampling import forward
from mgrpo_jax.sampling.sample import sample_tokens
from mgrpo_jax.sampling.sampling_params import SamplingParams


class Sampling(NamedTuple):
  """Traced sampling settings (scalars) and padded stop ids [K] (-1 = none)."""
  temperature: jax.Array
  top_k: jax.Array
  top_p: jax.Array
  stop_ids_K: jax.Array


def sampling_of(params: SamplingParams) -> Sampling:
  """A call's settings as traced scalars; stop ids padded to a power of two
  (at least 8), so stop-id lists of similar length share programs."""
  k = power_of_two(len(params.stop_token_ids), 8)
  stop_ids = np.full((k,), -1, np.int32)
  stop_ids[:len(params.stop_token_ids)] = params.stop_token_ids
  return Sampling(np.float32(params.temperature), np.int32(params.top_k),
                  np.float32(params.top_p), stop_ids)


def gather_window(cache: KVCache, rows_B: jax.Array, window: int,
                  start: int = 0) -> forward.Window:
  """Rows `rows_B` and slots [start, window) of the cache, per layer."""
  take = lambda x: tuple(jnp.take(x[i, :, :, start:window], rows_B, axis=0,
                                  mode="clip") for i in range(x.shape[0]))
  return forward.Window(take(cache.k), take(cache.v))


def scatter_window(cache: KVCache, rows_B: jax.Array, win: forward.Window,
                   *, by_layer: bool = False, start: int = 0) -> KVCache:
  """Writes a window back into its rows, from slot `start` on; rows >= R
  (padding) are dropped.

  by_layer=False stacks the window and writes it with one scatter; True
  writes one scatter per layer (no stacked copy). Per layer is faster in
  decode (the batch-32, 512-slot decode calls of bench/rollouts: 9.8-10.2 s
  against 12.9 s) but far slower in prefill, where XLA then copied the
  whole cache (a 1 x 256-token prefill 1.8 s), so only decode uses it.
  """
  end = start + win.k[0].shape[2]
  if by_layer:
    def put(x, layers):
      for i, y in enumerate(layers):
        x = x.at[i, rows_B, :, start:end].set(y, mode="drop")
      return x
  else:
    put = lambda x, y: x.at[:, rows_B, :, start:end].set(jnp.stack(y),
                                                         mode="drop")
  return KVCache(put(cache.k, win.k), put(cache.v, win.v))


def prefill(config: ModelConfig, dtype, window: int,
            weights: forward.Weights, cache: KVCache, rows_B: jax.Array,
            tokens_BxT: jax.Array,
            start_B: jax.Array, length_B: jax.Array, source_M: jax.Array,
            draw_M: jax.Array, sampling: Sampling,
            key: jax.Array) -> tuple[KVCache, jax.Array, jax.Array]:
  """Writes each row's new tokens and samples tokens that follow them.

  Row b's tokens_BxT[b, :length_B[b]] go to positions [start, start +
  length); the rest of the row is padding (its positions are pushed out of
  the window, so it writes nothing). Logits are computed only at each row's
  last new token. Draw m samples after row source_M[m]'s last token with
  fold_in(key, draw_M[m]): several draws may sample after one row (rollouts
  of one prompt, prefilled once). Returns (cache, tokens [M], their
  log-probs [M]); draws of a row with length 0 return garbage to be ignored.
  """
  t = tokens_BxT.shape[1]
  offsets_T = jnp.arange(t)
  valid_BxT = offsets_T[None, :] < length_B[:, None]
  positions_BxT = jnp.where(valid_BxT, start_B[:, None] + offsets_T, window)
  win = gather_window(cache, rows_B, window)
  h_BxTxD, win = forward.hidden_states(config, dtype, weights, tokens_BxT,
                                       positions_BxT, win)
  last_B = jnp.maximum(length_B - 1, 0)
  h_BxD = jnp.take_along_axis(h_BxTxD, last_B[:, None, None], axis=1)[:, 0]
  tokens_M, logprobs_M = sample_tokens(
      forward.logits(dtype, weights, h_BxD[source_M]), key,
      sampling.temperature, sampling.top_k, sampling.top_p, draw_M)
  return scatter_window(cache, rows_B, win), tokens_M, logprobs_M


def copy_rows(cache: KVCache, src_B: jax.Array, dst_B: jax.Array,
              window: int) -> KVCache:
  """Slots [0, window) of rows src_B copied into rows dst_B (dst >= R, i.e.
  padding, dropped): conversations that share a prompt prefix take its
  keys/values from the row that prefilled it."""
  put = lambda x: x.at[:, dst_B, :, :window].set(
      jnp.take(x[:, :, :, :window], src_B, axis=1, mode="clip"), mode="drop")
  return KVCache(put(cache.k), put(cache.v))


class DecodeOut(NamedTuple):
  """What one decode chunk returns besides the cache."""
  tokens_BxN: jax.Array  # int32; row b's new tokens are the first count delta.
  logprobs_BxN: jax.Array  # float32, aligned with tokens_BxN.
  count_B: jax.Array  # int32 tokens generated so far in this call.
  done_B: jax.Array  # bool, row finished (stop id, budget) or was already.


def decode_chunk(config: ModelConfig, dtype, window: int, steps: int,
                 prefix: int, weights: forward.Weights, cache: KVCache,
                 rows_B: jax.Array, prefix_row: jax.Array, last_B: jax.Array,
                 position_B: jax.Array, count_B: jax.Array,
                 budget_B: jax.Array, done_B: jax.Array, draw_B: jax.Array,
                 sampling: Sampling,
                 key: jax.Array) -> tuple[KVCache, DecodeOut]:
  """Up to `steps` decode steps in one `lax.while_loop`.

  prefix > 0 (cascade): every row holds the same first `prefix` tokens and
  every position is >= prefix; slots [0, prefix) are read from cache row
  `prefix_row` only, and each row's own window is slots [prefix, window).

  Each step feeds every row's last sampled token (not yet in the cache) at
  its position, samples the next one from the logits, and advances the rows
  still live; a row stops on a stop id or when count reaches its budget,
  and then never changes. The loop exits early once every row is done.
  Step i draws row b's token with fold_in(fold_in(key, i), draw_B[b]).
  """
  b = rows_B.shape[0]
  win = gather_window(cache, rows_B, window, prefix)
  shared = None
  if prefix:
    one = lambda x: tuple(x[i, prefix_row, :, :prefix]
                          for i in range(x.shape[0]))
    shared = forward.Window(one(cache.k), one(cache.v))
  tokens_BxN = jnp.zeros((b, steps), jnp.int32)
  logprobs_BxN = jnp.zeros((b, steps), jnp.float32)

  def cond(carry):
    i, done_B = carry[0], carry[-1]
    return (i < steps) & ~jnp.all(done_B)

  def body(carry):
    i, win, toks, lps, last_B, position_B, count_B, done_B = carry
    h_Bx1xD, win = forward.hidden_states(config, dtype, weights,
                                         last_B[:, None], position_B[:, None],
                                         win, shared)
    new_B, lp_B = sample_tokens(
        forward.logits(dtype, weights, h_Bx1xD[:, 0]),
        jax.random.fold_in(key, i),
        sampling.temperature, sampling.top_k, sampling.top_p, draw_B)
    live_B = ~done_B
    toks = lax.dynamic_update_slice(toks, new_B[:, None], (0, i))
    lps = lax.dynamic_update_slice(lps, lp_B[:, None], (0, i))
    count_B = count_B + live_B
    position_B = position_B + live_B
    last_B = jnp.where(live_B, new_B, last_B)
    stop_B = jnp.any(new_B[:, None] == sampling.stop_ids_K[None, :], axis=-1)
    done_B = done_B | (live_B & (stop_B | (count_B >= budget_B)))
    return i + 1, win, toks, lps, last_B, position_B, count_B, done_B

  carry = (jnp.int32(0), win, tokens_BxN, logprobs_BxN, last_B, position_B,
           count_B, done_B)
  _, win, toks, lps, _, _, count_B, done_B = lax.while_loop(cond, body, carry)
  return (scatter_window(cache, rows_B, win, by_layer=True, start=prefix),
          DecodeOut(toks, lps, count_B, done_B))
