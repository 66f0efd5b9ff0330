"""Where an engine's cache and PRNG keys live: on its weights' devices.

The KV cache is placed on the mesh the weights are on, split as the one
sharding table says (`models.sharding.cache_sharding`: key/value heads over
"tp", the rest whole on every device), and each call's key is put there
whole. The engine's programs are compiled for these placements
(`sampling.steps` keeps the cache so through every step), so a sampler
over several devices runs the programs it compiled at start-up. Weights
JAX was left to place (never put on a device) leave everything to JAX.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from mgrpo_jax.models import sharding
from mgrpo_jax.models.decoder import KVCache


@dataclasses.dataclass(frozen=True)
class Placement:
  """An engine's placements (None: JAX places it)."""
  cache_sharding: jax.sharding.Sharding | None
  key_sharding: jax.sharding.Sharding | None

  def cache(self, cache: KVCache) -> KVCache:
    """`cache` where the engine's programs take it."""
    if self.cache_sharding is None:
      return cache
    return jax.device_put(cache, KVCache(self.cache_sharding,
                                         self.cache_sharding))

  def key(self, key: jax.Array) -> jax.Array:
    """A PRNG key where the engine's programs take keys."""
    if self.key_sharding is None:
      return key
    return jax.device_put(key, self.key_sharding)


def of_weights(state: Any, cache_shape: tuple[int, ...]) -> Placement:
  """The placements of an engine whose model state is `state` and whose
  cache has `cache_shape` [L, R, G, S, Dh]."""
  mesh = sharding.mesh_of(state)
  if mesh is None:
    return Placement(None, None)
  return Placement(sharding.cache_sharding(cache_shape, mesh),
                   sharding.replicated(mesh))
