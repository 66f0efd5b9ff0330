"""sampling/placement.py: an engine's cache and keys on its weights'
devices, split as the sharding table says."""

import jax
import ml_collections
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from mgrpo_jax.models import sharding
from mgrpo_jax.models.decoder import KVCache
from mgrpo_jax.runtime import meshes
from mgrpo_jax.sampling import placement
from sampling_engine_test import CONFIG, _model

SHAPE = (CONFIG.num_layers, 4, CONFIG.num_kv_heads, 96, CONFIG.head_dim)


def _state_on(devices: int, shape: str):
  mesh = meshes.agent_meshes(ml_collections.ConfigDict({
      "share": True, "main": meshes.agent_config(devices, shape)}))["main"]
  return sharding.place_state(nnx.split(_model())[1], mesh), mesh


def test_weights_jax_placed_leave_cache_and_keys_to_jax():
  place = placement.of_weights(nnx.split(_model())[1], SHAPE)
  assert place == placement.Placement(None, None)
  key = jax.random.key(0)
  assert place.key(key) is key


def test_cache_heads_split_over_tp_and_keys_whole_on_every_device():
  state, mesh = _state_on(4, "fsdp:2,tp:2")
  place = placement.of_weights(state, SHAPE)
  cache = place.cache(KVCache(np.zeros(SHAPE, np.float32),
                              np.zeros(SHAPE, np.float32)))
  want = NamedSharding(mesh, PartitionSpec(None, None, "tp"))
  assert cache.k.sharding.is_equivalent_to(want, 5)
  assert cache.v.sharding.is_equivalent_to(want, 5)
  key = place.key(jax.random.key(1))
  assert key.committed and key.sharding.is_equivalent_to(
      NamedSharding(mesh, PartitionSpec()), 0)


def test_weights_on_one_device_put_the_cache_there():
  device = jax.devices()[3]
  state = jax.device_put(nnx.split(_model())[1], device)
  place = placement.of_weights(state, SHAPE)
  cache = place.cache(KVCache(np.zeros(SHAPE, np.float32),
                              np.zeros(SHAPE, np.float32)))
  assert cache.k.sharding.device_set == {device}
