"""Per-agent meshes on the 8 fake CPU devices of conftest.py."""

import jax
import ml_collections
import pytest
from jax.sharding import AxisType

from model_test_utils import tiny_config
from mgrpo_jax.models import build
from mgrpo_jax.runtime import meshes
from mgrpo_jax.runtime.config_checks import ConfigError


def config(main=4, sub=4, main_shape="", sub_shape="", share=False):
  c = ml_collections.ConfigDict()
  c.share = share
  c.main, c.sub = meshes.agent_config(), meshes.agent_config()
  c.main.devices, c.main.shape = main, main_shape
  c.sub.devices, c.sub.shape = sub, sub_shape
  return c


def ids(mesh):
  return sorted(d.id for d in mesh.devices.flat)


def test_four_plus_four_split_is_disjoint_main_first():
  out = meshes.agent_meshes(config(main_shape="fsdp:2,tp:2"))
  assert list(out) == ["main", "sub"]
  assert ids(out["main"]) == [0, 1, 2, 3] and ids(out["sub"]) == [4, 5, 6, 7]
  assert dict(out["main"].shape) == {"fsdp": 2, "tp": 2}
  assert dict(out["sub"].shape) == {"fsdp": 4, "tp": 1}
  for mesh in out.values():
    assert mesh.axis_names == ("fsdp", "tp")
    assert mesh.axis_types == (AxisType.Auto, AxisType.Auto)
  assert "sub: fsdp=4 tp=1 on devices [4, 5, 6, 7]" in meshes.describe(out)


def test_model_arrays_live_on_exactly_the_agents_devices():
  out = meshes.agent_meshes(config(main_shape="fsdp:2,tp:2",
                                   sub_shape="fsdp:2,tp:2"))
  model_config = tiny_config(num_layers=1)
  for name, mesh in out.items():
    model = build.init_model(model_config, mesh=mesh)
    for leaf in jax.tree.leaves(model):
      assert {d.id for d in leaf.devices()} == set(ids(mesh)), name
  wq = build.init_model(model_config, mesh=out["sub"]).wq[...]
  # [1, 64, 64] sharded 2 x 2: each device holds [1, 32, 32].
  assert {s.data.shape for s in wq.addressable_shards} == {(1, 32, 32)}


def test_shape_forms_and_other_agent_kinds():
  c = config(main=2, sub=2)
  c.main.shape = "tp:2"
  c.verifier = meshes.agent_config(devices=4, shape=(2, 2))
  out = meshes.agent_meshes(c)
  assert list(out) == ["main", "sub", "verifier"]
  assert dict(out["main"].shape) == {"fsdp": 1, "tp": 2}
  assert ids(out["verifier"]) == [4, 5, 6, 7]
  assert meshes.parse_shape((("tp", 4), ("fsdp", 2)), 8, "f") == {
      "fsdp": 2, "tp": 4}
  assert meshes.parse_shape({"fsdp": 2}, 2, "f") == {"fsdp": 2, "tp": 1}


def test_explicit_device_ids_and_the_rest_fill_the_gaps():
  c = config(main=2, sub=4)
  c.main.device_ids = (6, 7)
  out = meshes.agent_meshes(c)
  assert ids(out["main"]) == [6, 7] and ids(out["sub"]) == [0, 1, 2, 3]


def test_share_lets_agents_use_the_same_devices_on_purpose():
  one = jax.devices()[:1]
  with pytest.raises(ConfigError, match="config.mesh.share=True"):
    meshes.agent_meshes(config(main=1, sub=1), devices=one)
  out = meshes.agent_meshes(config(main=1, sub=1, share=True), devices=one)
  assert ids(out["main"]) == ids(out["sub"]) == [0]
  c = config(main=2, sub=2, share=True)
  c.main.device_ids, c.sub.device_ids = (0, 1), (1, 0)
  assert ids(meshes.agent_meshes(c)["sub"]) == [0, 1]


@pytest.mark.parametrize("edit, pattern", [
    (lambda c: setattr(c.sub, "devices", 8),
     r"config.mesh: main.devices=4 \+ sub.devices=8 requests 12 devices.*"
     r"only 8 device\(s\) exist.*xla_force_host_platform_device_count=12"
     r".*jax_num_cpu_devices"),
    (lambda c: setattr(c.main, "devices", 9),
     r"config.mesh.main.devices=9: expected at most 8.*"
     r"xla_force_host_platform_device_count=9"),
    (lambda c: setattr(c.main, "devices", 0),
     r"config.mesh.main.devices=0: expected an integer >= 1"),
    (lambda c: setattr(c.main, "shape", "fsdp:2,tp:3"),
     r"config.mesh.main.shape='fsdp:2,tp:3': expected axis sizes whose "
     r"product \(6\) equals devices=4"),
    (lambda c: setattr(c.sub, "shape", "dp:4"),
     r"config.mesh.sub.shape='dp:4': expected axis names from "
     r"\('fsdp', 'tp'\); got unknown axis 'dp'"),
    (lambda c: setattr(c.sub, "shape", "fsdp=4"),
     r"config.mesh.sub.shape='fsdp=4': expected '' or a string like"),
    (lambda c: setattr(c.sub, "shape", "fsdp:2,fsdp:2"),
     r"'fsdp' is repeated"),
    (lambda c: (setattr(c.main, "device_ids", (0, 1, 2, 3)),
                setattr(c.sub, "device_ids", (3, 4, 5, 6))),
     r"config.mesh.sub.device_ids=\(3, 4, 5, 6\): expected ids not used by "
     r"another agent; device 3 is also in config.mesh.main.device_ids"),
    (lambda c: setattr(c.main, "device_ids", (0, 1)),
     r"config.mesh.main.device_ids=\(0, 1\): expected 4 ids"),
    (lambda c: setattr(c.main, "device_ids", (0, 1, 2, 42)),
     r"expected ids of existing devices \[0, 1, 2, 3, 4, 5, 6, 7\]; \[42\]"),
    (lambda c: setattr(c, "extra", 3),
     r"config.mesh.extra=3: expected an agent section"),
])
def test_errors_name_field_value_and_expectation(edit, pattern):
  c = config()
  edit(c)
  with pytest.raises(ConfigError, match=pattern):
    meshes.agent_meshes(c)


def test_share_must_be_a_bool():
  c = ml_collections.ConfigDict(dict(config().to_dict(), share="yes"))
  with pytest.raises(ConfigError, match="config.mesh.share='yes': expected "
                     "True or False"):
    meshes.agent_meshes(c)


def test_sampler_mesh_is_this_process_s_devices_of_the_agent_s_mesh():
  four = jax.make_mesh((2, 2), ("fsdp", "tp"), devices=jax.devices()[:4])
  assert meshes.sampler_mesh(four) is four  # One process, every device.
  one = meshes.sampler_mesh(four, 1)
  assert one.devices.size == 1 and dict(one.shape) == {"fsdp": 1, "tp": 1}
  two = meshes.sampler_mesh(four, 2)  # tp 2 kept: it divides 2.
  assert dict(two.shape) == {"fsdp": 1, "tp": 2}
  assert list(two.devices.flat) == list(four.devices.flat)[:2]
  three = meshes.sampler_mesh(four, 3)  # 3 is not a multiple of tp 2.
  assert dict(three.shape) == {"fsdp": 3, "tp": 1}
  with pytest.raises(ConfigError, match=r"sampler devices=5: expected an "
                      r"integer in 0 \.\. 4"):
    meshes.sampler_mesh(four, 5)
