"""Parameters are born sharded on a real 8-device CPU mesh, by the rules."""

import jax
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P

from mgrpo_jax.models import build, sharding
from mgrpo_jax.models.config import ModelConfig

CONFIG = ModelConfig(family="llama", vocab_size=128, hidden_size=64,
                     intermediate_size=96, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=16, rope_theta=1e4,
                     rms_norm_eps=1e-6, tie_word_embeddings=False)


def mesh(shape):
  return jax.make_mesh(shape, ("fsdp", "tp"),
                       axis_types=(AxisType.Auto, AxisType.Auto),
                       devices=jax.devices()[:int(np.prod(shape))])


def test_eight_devices_exist():
  assert len(jax.devices()) == 8


def test_rules_shard_what_divides_and_replicate_the_rest():
  m = mesh((2, 4))
  assert sharding.partition_spec(("embed", "mlp"), (64, 96), m) == P("fsdp", "tp")
  # 2 kv heads x 16 = 32 divides by 4; a dimension of 6 would not.
  assert sharding.partition_spec(("embed", "kv"), (64, 6), m) == P("fsdp", None)
  assert sharding.partition_spec(("layers", "norm"), (2, 64), m) == P(None, None)


def test_init_and_load_are_born_sharded():
  m = mesh((2, 4))
  model = build.init_model(CONFIG, mesh=m)
  wq = model.wq[...]
  assert wq.sharding.spec == P(None, "fsdp", "tp")
  # Each device holds only its shard: [2, 64/2, 64/4].
  assert {s.data.shape for s in wq.addressable_shards} == {(2, 32, 16)}
  # Small weights keep logits O(1); a sharded matmul sums in another order,
  # so the comparison needs a float32 rounding tolerance.
  arrays = {k: 0.1 * np.random.default_rng(0).normal(size=s).astype(np.float32)
            for k, s in build.expected_shapes(CONFIG).items()}
  loaded = build.model_from_arrays(CONFIG, arrays, mesh=m)
  assert loaded.w_down[...].sharding.spec == P(None, "tp", "fsdp")
  np.testing.assert_array_equal(np.asarray(loaded.embed[...]), arrays["embed"])
  # A sharded forward pass gives the same logits as an unsharded one.
  plain = build.model_from_arrays(CONFIG, arrays)
  tokens = np.arange(12).reshape(2, 6)
  np.testing.assert_allclose(loaded(tokens), plain(tokens), rtol=1e-4, atol=1e-5)


def test_model_from_arrays_names_the_bad_tensor():
  arrays = {k: np.zeros(s, np.float32)
            for k, s in build.expected_shapes(CONFIG).items()}
  arrays["wk"] = np.zeros((2, 64, 8), np.float32)
  try:
    build.model_from_arrays(CONFIG, arrays, source="ckpt/model.safetensors")
  except ValueError as e:
    assert "ckpt/model.safetensors: parameter 'wk' has shape (2, 64, 8); the config expects (2, 64, 32)" in str(e)
  else:
    raise AssertionError("no error")
  del arrays["wk"]
  try:
    build.model_from_arrays(CONFIG, arrays)
  except ValueError as e:
    assert "missing ['wk']" in str(e)


def test_place_state_reshards_onto_another_mesh_by_the_rules():
  """A learner's weights on a 2 x 4 mesh, placed on a sampler's 2 x 1
  mesh: the same values, sharded by the rules for the new mesh."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  model = build.init_model(CONFIG, mesh=mesh((2, 4)))
  state = nnx.split(model)[1]
  small = mesh((2, 1))
  placed = sharding.place_state(state, small)
  for (path, before), (_, after) in zip(nnx.to_flat_state(state),
                                        nnx.to_flat_state(placed)):
    np.testing.assert_array_equal(np.asarray(after[...]),
                                  np.asarray(before[...]), err_msg=str(path))
    assert after[...].sharding.mesh.devices.size == 2
  assert placed["wq"][...].sharding.spec == P(None, "fsdp", "tp")  # tp: 1.


def test_experts_split_over_the_data_axis_and_an_undivided_axis_is_named():
  from mgrpo_jax.models.config import ModelConfig as Config
  from flax import nnx
  moe = Config(family="qwen3_moe", vocab_size=128, hidden_size=32,
               intermediate_size=64, num_layers=2, num_heads=4,
               num_kv_heads=2, head_dim=8, rope_theta=1e4, rms_norm_eps=1e-6,
               tie_word_embeddings=False, qk_norm=True, num_experts=8,
               experts_per_token=2, moe_intermediate_size=16,
               norm_topk_prob=True)
  arrays = {k: 0.3 * np.random.default_rng(1).normal(size=s).astype(
      np.float32) for k, s in build.expected_shapes(moe).items()}
  plain = build.model_from_arrays(moe, arrays)
  m = mesh((4, 2))
  split = build.model_from_arrays(moe, arrays, mesh=m)
  gate = split.expert_gate[...]
  assert gate.sharding.spec == P(None, "fsdp", None, "tp")
  # Each device holds 2 of the 8 experts (and half of each one's width).
  assert {s.data.shape for s in gate.addressable_shards} == {(2, 2, 32, 8)}
  tokens = np.arange(24).reshape(3, 8) % 128
  np.testing.assert_allclose(split(tokens), plain(tokens), rtol=1e-4,
                             atol=1e-4)
  assert sharding.undivided(nnx.split(split)[1], m) == []
  six = Config(**{**moe.__dict__, "num_experts": 6})
  notes = sharding.undivided(nnx.split(build.init_model(six, mesh=m))[1], m)
  assert "expert_gate: its experts axis (6) is not divided by the mesh's " \
      "fsdp axis (4), so it is replicated" in notes


def test_the_kv_cache_splits_heads_over_tp_when_it_divides_them():
  import ml_collections
  from mgrpo_jax.runtime import meshes
  mesh = meshes.agent_meshes(ml_collections.ConfigDict({
      "share": True, "main": meshes.agent_config(4, "fsdp:2,tp:2")}))["main"]
  assert sharding.cache_sharding((2, 8, 4, 64, 16), mesh).spec == (
      P(None, None, "tp", None, None))
  # 3 key/value heads on a 2-way tp axis: whole on every device.
  assert sharding.cache_sharding((2, 8, 3, 64, 16), mesh).spec == (
      P(None, None, None, None, None))


def test_mesh_of_names_the_one_mesh_and_refuses_two():
  import jax.numpy as jnp
  x = jnp.zeros(4)
  assert sharding.mesh_of({"a": x}) is None  # Never placed: JAX's.
  one = jax.device_put(x, jax.devices()[2])
  assert sharding.mesh_of({"a": one}).devices.tolist() == [jax.devices()[2]]
  two = jax.device_put(x, jax.devices()[3])
  import pytest
  with pytest.raises(ValueError, match=r"mesh_of: the leaves are on 2 "
                     r"meshes .*expected one"):
    sharding.mesh_of({"a": one, "b": two})
