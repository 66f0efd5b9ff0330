"""Creating models whose parameters are born sharded.

`init_model` initialises randomly; `model_from_arrays` places host arrays
(e.g. read from a checkpoint, or views that read only the shards' regions of
it) straight onto their shards. Neither ever holds a full copy of a sharded
parameter on one device.
"""

from __future__ import annotations

from typing import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from mgrpo_jax.models import sharding
from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.models.decoder import Decoder
from mgrpo_jax.models.tensor_views import ParameterView


def _abstract(config: ModelConfig, dtype, param_dtype):
  return nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0), dtype=dtype,
                                        param_dtype=param_dtype))


def init_model(config: ModelConfig, *, seed: int = 0, mesh: Mesh | None = None,
               dtype=jnp.float32, param_dtype=jnp.float32) -> Decoder:
  """A randomly initialised decoder, sharded over `mesh` when given."""

  def create():
    model = Decoder(config, rngs=nnx.Rngs(seed), dtype=dtype,
                    param_dtype=param_dtype)
    return nnx.split(model)[1]

  graphdef, abstract_state = nnx.split(_abstract(config, dtype, param_dtype))
  out_shardings = (None if mesh is None
                   else sharding.state_shardings(abstract_state, mesh))
  state = jax.jit(create, out_shardings=out_shardings)()
  return nnx.merge(graphdef, state)


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
  """Name -> shape of every parameter of a decoder with this config."""
  _, state = nnx.split(_abstract(config, jnp.float32, jnp.float32))
  return {".".join(map(str, path)): tuple(v.shape)
          for path, v in nnx.to_flat_state(state)}


def model_from_arrays(config: ModelConfig, arrays: Mapping[str, np.ndarray], *,
                      mesh: Mesh | None = None, dtype=jnp.float32,
                      param_dtype=jnp.float32, source: str = "arrays"
                      ) -> Decoder:
  """A decoder holding the given parameters (names as in `expected_shapes`).

  Each host array is cast to `param_dtype` and put directly onto its shards
  (`jax.device_put` with its NamedSharding). On a mesh over several
  processes each process places only its own devices' shards, and a
  `ParameterView` (hf_checkpoint.read_weights(lazy=True)) is read only
  where this process's shards need it. Missing, extra or mis-shaped arrays
  raise a ValueError naming `source`, the parameter and both shapes.
  """
  graphdef, abstract_state = nnx.split(_abstract(config, dtype, param_dtype))
  shardings = (None if mesh is None
               else sharding.state_shardings(abstract_state, mesh))
  want = expected_shapes(config)
  missing = sorted(set(want) - set(arrays))
  extra = sorted(set(arrays) - set(want))
  if missing or extra:
    raise ValueError(f"{source}: parameters do not match the config: missing "
                     f"{missing}, unexpected {extra}.")
  for name, shape in want.items():
    if tuple(np.shape(arrays[name])) != shape:
      raise ValueError(f"{source}: parameter '{name}' has shape "
                       f"{tuple(np.shape(arrays[name]))}; the config expects "
                       f"{shape}.")

  def place(path, variable):
    value = arrays[".".join(map(str, path))]
    dtype = jnp.dtype(param_dtype)
    target = None
    if shardings is not None:
      target = shardings
      for part in path:
        target = target[part]
      target = target.sharding if hasattr(target, "sharding") else target
      if isinstance(value, ParameterView) or not target.is_fully_addressable:
        # Shard by shard: on a mesh over several processes each places
        # only its own devices' shards (no cross-host check); a view reads
        # only those regions of its files.
        return variable.replace(jax.make_array_from_callback(
            value.shape, target, _shard_reader(value, dtype)))
    return variable.replace(jax.device_put(np.asarray(value).astype(dtype),
                                           target))

  state = nnx.from_flat_state(
      [(path, place(path, v)) for path, v in nnx.to_flat_state(abstract_state)])
  return nnx.merge(graphdef, state)


def _shard_reader(value, dtype) -> Callable[[tuple[slice, ...]], np.ndarray]:
  """index -> value[index] as `dtype`, each distinct index read once (the
  devices that replicate a shard share one host copy)."""
  read: dict[tuple, np.ndarray] = {}

  def shard(index):
    key = tuple((s.start, s.stop, s.step) for s in index)
    if key not in read:
      read[key] = np.asarray(value[index]).astype(dtype)
    return read[key]

  return shard
