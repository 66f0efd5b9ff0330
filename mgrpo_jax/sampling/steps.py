"""The engine's jitted steps, compiled once per model structure.

Every engine whose model has the same structure (graphdef) shares them, and
their trace counts (= compilations).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Any, Callable

import jax
from flax import nnx

from mgrpo_jax.sampling import forward, generation


@dataclasses.dataclass(frozen=True)
class Steps:
  """Jitted steps of one model structure, and their trace counts."""
  split: Callable[[nnx.State, str], forward.Weights]
  prefill: Callable[..., Any]
  decode: Callable[..., Any]
  copy: Callable[..., Any]
  traces: collections.Counter


@functools.lru_cache(maxsize=None)
def compiled_steps(graphdef: nnx.GraphDef) -> Steps:
  """One set of jitted steps per model structure, shared across engines."""
  traces = collections.Counter()
  def split(state, weights_dtype):
    traces["split"] += 1
    return forward.split_weights(nnx.merge(graphdef, state), weights_dtype)

  def prefill(config, dtype, window, *args):
    traces["prefill"] += 1
    return generation.prefill(config, dtype, window, *args)

  def decode(config, dtype, window, steps, prefix, *args):
    traces["decode"] += 1
    return generation.decode_chunk(config, dtype, window, steps, prefix,
                                   *args)

  def copy(window, cache, src_B, dst_B):
    traces["copy"] += 1
    return generation.copy_rows(cache, src_B, dst_B, window)

  # The cache (first argument after the weights) is donated: updated in place.
  return Steps(jax.jit(split, static_argnums=(1,)),
                jax.jit(prefill, static_argnums=(0, 1, 2),
                        donate_argnums=(4,)),
                jax.jit(decode, static_argnums=(0, 1, 2, 3, 4),
                        donate_argnums=(6,)),
                jax.jit(copy, static_argnums=(0,), donate_argnums=(1,)),
                traces)
