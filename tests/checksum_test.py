"""runtime/checksum.py: exact, and the same on any layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.runtime.checksum import checksum


def _tree(seed=0):
  rng = np.random.default_rng(seed)
  return {"w": jnp.asarray(rng.normal(size=(8, 6)), jnp.float32),
          "b": jnp.asarray(rng.normal(size=(6,)), jnp.bfloat16),
          "n": jnp.arange(5, dtype=jnp.int32)}


def test_the_same_weights_give_the_same_number_on_any_layout():
  tree = _tree()
  one = checksum(tree)
  assert isinstance(one, int) and 0 <= one < 2**32
  devices = np.array(jax.devices()[:8]).reshape(4, 2)
  mesh = jax.sharding.Mesh(devices, ("fsdp", "tp"))
  spec = {"w": jax.sharding.PartitionSpec("fsdp", "tp"),
          "b": jax.sharding.PartitionSpec("tp"),
          "n": jax.sharding.PartitionSpec()}
  sharded = {k: jax.device_put(v, jax.sharding.NamedSharding(mesh, spec[k]))
             for k, v in tree.items()}
  assert checksum(sharded) == one
  # The sum the definition gives, in numpy (uint64, then mod 2**32).
  leaves = jax.tree.leaves(tree)  # Sorted keys: b, n, w.
  bits = [np.asarray(leaves[0]).view(np.uint16).astype(np.uint64),
          np.asarray(leaves[1]).view(np.uint32).astype(np.uint64),
          np.asarray(leaves[2]).view(np.uint32).astype(np.uint64)]
  want = sum(int(b.sum()) * (2 * i + 1) for i, b in enumerate(bits)) % 2**32
  assert one == want


def test_one_ulp_or_a_swap_changes_it():
  tree = _tree()
  base = checksum(tree)
  nudged = dict(tree, w=tree["w"].at[3, 2].set(
      jnp.nextafter(tree["w"][3, 2], jnp.float32(np.inf))))
  assert checksum(nudged) != base
  swapped = {"a": tree["w"], "z": tree["w"] * 2}
  assert checksum(swapped) != checksum({"a": tree["w"] * 2, "z": tree["w"]})


def test_a_64_bit_weight_is_refused_by_name():
  with pytest.raises(ValueError, match="dtype uint64|64 bits"):
    from mgrpo_jax.runtime.checksum import _bits_u32
    _bits_u32(np.zeros(2, np.uint64))
