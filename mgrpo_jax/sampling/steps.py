"""The engine's jitted steps, compiled once per model structure, cache
placement and shape.

Every engine whose model has the same structure (graphdef) and whose cache
is placed alike (`models.sharding.cache_sharding` on the same devices)
shares them, their compiled programs (`runtime.programs.Programs`, one per
call shape, compiled on first use or ahead of time by `Engine.precompile`)
and their trace counts (= compilations). Each step hands the cache back
placed as it came, so the programs compiled for its placement run every
call.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import time
from typing import Any, Callable

import jax
import numpy as np
from flax import nnx

from mgrpo_jax.runtime.programs import Programs
from mgrpo_jax.sampling import forward, generation
from mgrpo_jax.sampling.sampling_params import SamplingParams


@dataclasses.dataclass(frozen=True)
class Steps:
  """Jitted steps of one model structure, and their trace counts."""
  split: Callable[[nnx.State, str], forward.Weights]
  prefill: Programs
  decode: Programs
  copy: Programs
  traces: collections.Counter

  def precompile(self, calls: dict[str, list[tuple]], layout: Any,
                 threads: int) -> tuple[int, float]:
    """Compiles the program of each call (`example_calls`) of an engine
    whose weights and cache have `layout`; (programs, seconds)."""
    start = time.perf_counter()
    for name, todo in calls.items():
      getattr(self, name).precompile(todo, layout=layout, threads=threads)
    return sum(map(len, calls.values())), time.perf_counter() - start


# The names of each step's arguments, for errors (`Programs(arg_names=)`).
PREFILL_ARGS = ("config", "dtype", "window", "weights", "cache", "rows_B",
                "tokens_BxT", "start_B", "length_B", "source_M", "draw_M",
                "sampling", "key")
DECODE_ARGS = ("config", "dtype", "window", "steps", "prefix", "weights",
               "cache", "rows_B", "prefix_row", "last_B", "position_B",
               "count_B", "budget_B", "done_B", "draw_B", "sampling", "key")
COPY_ARGS = ("window", "cache", "src_B", "dst_B")


@functools.lru_cache(maxsize=None)
def compiled_steps(graphdef: nnx.GraphDef,
                   cache_sharding: jax.sharding.Sharding | None = None
                   ) -> Steps:
  """One set of jitted steps per model structure and cache placement
  (None: a cache JAX places), shared across engines."""
  traces = collections.Counter()
  keep = ((lambda cache: cache) if cache_sharding is None else
          (lambda cache: jax.lax.with_sharding_constraint(cache,
                                                          cache_sharding)))
  def split(state, weights_dtype):
    traces["split"] += 1
    return forward.split_weights(nnx.merge(graphdef, state), weights_dtype)

  def prefill(config, dtype, window, *args):
    traces["prefill"] += 1
    cache, first, first_lp = generation.prefill(config, dtype, window, *args)
    return keep(cache), first, first_lp

  def decode(config, dtype, window, steps, prefix, *args):
    traces["decode"] += 1
    cache, out = generation.decode_chunk(config, dtype, window, steps, prefix,
                                         *args)
    return keep(cache), out

  def copy(window, cache, src_B, dst_B):
    traces["copy"] += 1
    return keep(generation.copy_rows(cache, src_B, dst_B, window))

  # The cache (first argument after the weights) is donated: updated in
  # place. Weights and cache keep their shapes: left out of a call's key.
  return Steps(
      jax.jit(split, static_argnums=(1,)),
      Programs("prefill", jax.jit(prefill, static_argnums=(0, 1, 2),
                                  donate_argnums=(4,)),
               static_argnums=(0, 1, 2), fixed_argnums=(3, 4),
               arg_names=PREFILL_ARGS),
      Programs("decode", jax.jit(decode, static_argnums=(0, 1, 2, 3, 4),
                                 donate_argnums=(6,)),
               static_argnums=(0, 1, 2, 3, 4), fixed_argnums=(5, 6),
               arg_names=DECODE_ARGS),
      Programs("copy", jax.jit(copy, static_argnums=(0,),
                               donate_argnums=(1,)),
               static_argnums=(0,), fixed_argnums=(1,),
               arg_names=COPY_ARGS),
      traces)


def example_calls(plan: dict[str, list[tuple[int, ...]]], config, dtype,
                  chunk_steps: int, weights: forward.Weights, cache,
                  stop_ids: int, key: jax.Array) -> dict[str, list[tuple]]:
  """Arguments of one call of each program of `plan` (`Shapes.programs()`),
  for `Programs.precompile`: an engine's weights and cache, zeros of each
  shape, `stop_ids` stop ids, PRNG keys like `key` (placed as the calls'
  keys will be)."""
  sampling = generation.sampling_of(SamplingParams(
      temperature=1.0, stop_token_ids=tuple(range(stop_ids))))
  i32 = lambda *shape: np.zeros(shape, np.int32)
  rows = cache.k.shape[1]
  return {
      "decode": [(config, dtype, w, chunk_steps, p, weights, cache, i32(b),
                  np.int32(0), i32(b), i32(b), i32(b), i32(b),
                  np.zeros(b, bool), i32(b), sampling, key)
                 for b, w, p in plan["decode"]],
      "prefill": [(config, dtype, w, weights, cache, i32(b), i32(b, t),
                   i32(b), i32(b), i32(rows), i32(rows), sampling, key)
                  for b, t, w in plan["prefill"]],
      "copy": [(w, cache, i32(b), i32(b)) for b, w in plan["copy"]]}
