"""runtime/store_weights.py: publishing, reading and pruning an agent's
weights in the store (a local store here; store_test.py runs the same
calls on gs:// too)."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from mgrpo_jax.runtime import store as store_lib
from mgrpo_jax.runtime.store_weights import step_name


def _params(version: int) -> dict:
  return {"w": np.full((4, 6), version, np.float32),
          "b": np.arange(6, dtype=np.float32) + version}


def test_step_names_sort_in_step_order_and_bad_steps_are_named():
  assert step_name(7) == "0000000007" and step_name(7) < step_name(10)
  for bad in (-1, 1.0, True, "3"):
    with pytest.raises(store_lib.StoreError, match="expected a non-negative"):
      step_name(bad)


def test_versions_must_increase_and_agents_be_plain_names(tmp_path):
  store = store_lib.open_store(str(tmp_path / "store"))
  store.publish_weights("sub", 3, _params(3))
  with pytest.raises(store_lib.StoreError, match=(
      r"step=3 is not after the latest published step 3")):
    store.publish_weights("sub", 3, _params(3))
  with pytest.raises(store_lib.StoreError, match=r"agent='\.\./x'"):
    store.publish_weights("../x", 4, _params(4))
  assert store.latest_weights_step("verifier") is None
  with pytest.raises(store_lib.StoreError, match=r"available: \[\]"):
    store.load_weights("verifier", 0)
  store.close()


def test_a_reader_restores_onto_the_target_s_shardings(tmp_path):
  writer = store_lib.open_store(str(tmp_path / "store"), keep_weights=2)
  for version in range(4):
    writer.publish_weights("sub", version, _params(version))
  reader = store_lib.open_store(str(tmp_path / "store"))
  assert reader.latest_weights_step("sub") == 3
  with pytest.raises(store_lib.StoreError, match=r"available: \[2, 3\]"):
    reader.load_weights("sub", 1)  # keep_weights=2 deleted it.
  mesh = jax.make_mesh((2,), ("fsdp",), devices=jax.devices()[:2])
  rows = NamedSharding(mesh, PartitionSpec("fsdp"))
  target = {"w": jax.ShapeDtypeStruct((4, 6), np.float32, sharding=rows),
            "b": jax.ShapeDtypeStruct((6,), np.float32, sharding=rows)}
  got = reader.load_weights("sub", 3, target)
  assert got["w"].sharding == rows and len(got["w"].addressable_shards) == 2
  np.testing.assert_array_equal(np.asarray(got["w"]), _params(3)["w"])
  plain = reader.load_weights("sub", 2)  # No target: host numpy arrays.
  assert isinstance(plain["b"], np.ndarray)
  np.testing.assert_array_equal(plain["b"], _params(2)["b"])
  reader.close()
  writer.close()
