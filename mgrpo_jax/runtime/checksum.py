"""A checksum of weights that any process, device layout or mesh agrees on.

`checksum(tree)` is the sum, modulo 2**32, of every weight's bit pattern
(float32 read as uint32; 16-bit types widened), each leaf's sum multiplied
by an odd number of its own (2 i + 1 for the i-th leaf) so that two leaves
trading values change it. Integer addition that wraps is exact and does not
depend on the order it adds in, so the same weights give the same number
whether they sit on one device, are sharded over a mesh, or span the
devices of several processes (a float sum would differ in its last bits
between layouts). It is computed where the weights are, in one jitted
program, and comes back replicated: nothing but one integer leaves the
devices, and every process reads it from its own copy.

The trainer logs it for the sub-agent weights a rollout sampled with
(`weights/sub_checksum`) and those the sub side published
(`weights/published_checksum`): equal numbers mean the very same weights.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _bits_u32(x: jax.Array) -> jax.Array:
  """The bit patterns of `x` as uint32 (narrower types zero-extended)."""
  width = jnp.dtype(x.dtype).itemsize
  if x.dtype == jnp.bool_:
    return x.astype(jnp.uint32)
  if width not in (1, 2, 4):
    raise ValueError(f"checksum: a weight of dtype {x.dtype} ({width * 8} "
                     "bits): expected 8, 16 or 32-bit values.")
  unsigned = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}[width]
  return jax.lax.bitcast_convert_type(x, unsigned).astype(jnp.uint32)


def _total(leaves: list[jax.Array]) -> jax.Array:
  total = jnp.uint32(0)
  for i, leaf in enumerate(leaves):
    total = total + jnp.sum(_bits_u32(leaf), dtype=jnp.uint32) * jnp.uint32(
        2 * i + 1)
  return total


def _replicated(leaves: list[jax.Array]):
  """A replicated sharding on the leaves' mesh (None: leave it to jit)."""
  for leaf in leaves:
    sharding = getattr(leaf, "sharding", None)
    if isinstance(sharding, jax.sharding.NamedSharding):
      return jax.sharding.NamedSharding(sharding.mesh,
                                        jax.sharding.PartitionSpec())
  return None


def checksum(tree: Any) -> int:
  """The weights' checksum (module docstring): an int in [0, 2**32)."""
  leaves = [jnp.asarray(x) if not isinstance(x, jax.Array) else x
            for x in jax.tree.leaves(tree)]
  out = jax.jit(_total, out_shardings=_replicated(leaves))(leaves)
  return int(np.asarray(out.addressable_data(0)))
