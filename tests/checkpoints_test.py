"""Per-agent checkpoints: round trip across meshes, pruning, killed saves."""

import os
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from model_test_utils import tiny_config
from mgrpo_jax.models import build
from mgrpo_jax.runtime.checkpoints import AgentCheckpointer


def mesh(first):
  """A 2-device mesh on devices [first, first + 1]."""
  devices = np.array(jax.devices()[first:first + 2]).reshape(2, 1)
  return Mesh(devices, ("fsdp", "tp"), axis_types=(AxisType.Auto,) * 2)


def model_params(m, seed):
  return nnx.split(build.init_model(tiny_config(num_layers=1), seed=seed,
                                    mesh=m))[1]


def small_state(step, m):
  """params = step * ones, sharded over fsdp; opt_state = a step counter."""
  w = jax.device_put(jnp.full((8, 4), step, jnp.float32),
                     NamedSharding(m, P("fsdp")))
  count = jax.device_put(jnp.int32(step), NamedSharding(m, P()))
  return {"w": w}, {"count": count}


def opt_init_on_mesh(optimizer, params, m):
  """optimizer.init with each moment sharded like its parameter.

  (A plain jax.jit(optimizer.init) leaves the state on one device: its zeros
  do not depend on the parameters, so no sharding reaches them.)
  """
  abstract = jax.eval_shape(optimizer.init, params)
  shardings = optax.tree_utils.tree_map_params(
      optimizer, lambda _, p: p.sharding, abstract, params,
      transform_non_params=lambda _: NamedSharding(m, P()))
  return jax.jit(optimizer.init, out_shardings=shardings)(params)


def moved(tree, m):
  """Abstract arrays like `tree`, with the same specs on mesh `m`."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(
      x.shape, x.dtype, sharding=NamedSharding(m, x.sharding.spec)), tree)


def test_round_trip_onto_another_mesh(tmp_path):
  mesh_a, mesh_b = mesh(0), mesh(2)
  params = model_params(mesh_a, seed=0)
  optimizer = optax.adamw(1e-2)

  @jax.jit
  def train_step(params, opt_state):
    grads = jax.tree.map(jnp.ones_like, params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  params, opt_state = train_step(
      params, opt_init_on_mesh(optimizer, params, mesh_a))
  key = jax.random.split(jax.random.key(7))[1]
  with AgentCheckpointer(tmp_path, "main", max_to_keep=3, save_every=1) as ckpt:
    assert ckpt.latest_step() is None
    assert ckpt.restore_latest(params, opt_state) is None
    assert ckpt.save(5, params, opt_state, key=key,
                     data_position={"epoch": 1, "index": 37},
                     metadata={"run": "test"})

  # A fresh checkpointer (as after a restart), targets on other devices.
  target = moved((params, opt_state), mesh_b)
  with AgentCheckpointer(tmp_path, "main", max_to_keep=3, save_every=1) as ckpt:
    out = ckpt.restore_latest(*target)
  assert out.step == 5 and out.metadata == {"run": "test"}
  assert out.data_position == {"epoch": 1, "index": 37}
  assert jax.tree.structure(out.params) == jax.tree.structure(params)
  assert jax.tree.structure(out.opt_state) == jax.tree.structure(opt_state)
  for got, want, abstract in zip(jax.tree.leaves((out.params, out.opt_state)),
                                 jax.tree.leaves((params, opt_state)),
                                 jax.tree.leaves(target)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert got.sharding == abstract.sharding
    assert {d.id for d in got.devices()} == {2, 3}
  # wq [1 layer, 64, 64] is split over fsdp: each device reads its half.
  assert {s.data.shape for s in out.params["wq"][...].addressable_shards} == {
      (1, 32, 64)}
  assert jnp.issubdtype(out.key.dtype, jax.dtypes.prng_key)
  np.testing.assert_array_equal(jax.random.key_data(out.key),
                                jax.random.key_data(key))


def test_latest_wins_max_to_keep_prunes_save_every_skips(tmp_path):
  m = mesh(0)
  with AgentCheckpointer(tmp_path, "sub", max_to_keep=2, save_every=2) as ckpt:
    saved = [ckpt.save(s, *small_state(s, m), key=jax.random.PRNGKey(s),
                       data_position=s) for s in range(5)]
    assert saved == [True, False, True, False, True]
    assert ckpt.save(5, *small_state(5, m), key=jax.random.PRNGKey(5),
                     data_position=5, force=True)
    ckpt.wait_until_finished()
    assert ckpt.steps() == [4, 5] and ckpt.latest_step() == 5
    out = ckpt.restore_latest(*small_state(0, m))
    assert out.step == 5 and out.data_position == 5
    np.testing.assert_array_equal(out.params["w"], np.full((8, 4), 5.0))
    # A raw uint32 key comes back raw.
    assert out.key.dtype == jnp.uint32
    np.testing.assert_array_equal(out.key, jax.random.PRNGKey(5))
    assert int(ckpt.restore(4, *small_state(0, m)).opt_state["count"]) == 4
    with pytest.raises(ValueError, match="step=3: expected a step after the "
                       "latest checkpoint 5"):
      ckpt.save(3, *small_state(3, m), key=jax.random.PRNGKey(3),
                data_position=3, force=True)
  assert sorted(os.listdir(tmp_path / "sub")) == ["4", "5"]
  # Dropping the steps after 4 lets step 5 be saved again (a redone step).
  with AgentCheckpointer(tmp_path, "sub", max_to_keep=2, save_every=1) as ckpt:
    assert ckpt.discard_after(4) == [5] and ckpt.steps() == [4]
    assert ckpt.save(5, *small_state(7, m), key=jax.random.PRNGKey(7),
                     data_position=7)
    ckpt.wait_until_finished()
    assert ckpt.restore_latest(*small_state(0, m)).data_position == 7
    assert ckpt.discard_after(None) == [4, 5] and ckpt.latest_step() is None
  assert os.listdir(tmp_path / "sub") == []


def test_half_written_step_directories_are_ignored(tmp_path):
  m = mesh(0)
  with AgentCheckpointer(tmp_path, "main", max_to_keep=3, save_every=1) as ckpt:
    ckpt.save(1, *small_state(1, m), key=jax.random.key(1), data_position=1)
  # What a process killed mid-save leaves behind.
  for name in ("2.orbax-checkpoint-tmp", "3.orbax-checkpoint-tmp-1754000000"):
    (tmp_path / "main" / name / "state").mkdir(parents=True)
    (tmp_path / "main" / name / "state" / "half").write_bytes(b"\0" * 100)
  with AgentCheckpointer(tmp_path, "main", max_to_keep=3, save_every=1) as ckpt:
    assert ckpt.steps() == [1] and ckpt.latest_step() == 1
    out = ckpt.restore_latest(*small_state(0, m))
    assert out.step == 1
    np.testing.assert_array_equal(out.params["w"], np.ones((8, 4)))
    ckpt.save(2, *small_state(2, m), key=jax.random.key(2), data_position=2)
    ckpt.wait_until_finished()
    assert ckpt.steps() == [1, 2]
  assert sorted(os.listdir(tmp_path / "main")) == ["1", "2"]


def test_errors_name_the_argument(tmp_path):
  m = mesh(0)
  with pytest.raises(ValueError, match="agent='a/b': expected a directory"):
    AgentCheckpointer(tmp_path, "a/b", max_to_keep=3, save_every=1)
  with pytest.raises(ValueError, match="save_every=0: expected an integer"):
    AgentCheckpointer(tmp_path, "main", save_every=0, max_to_keep=3)
  ckpt = AgentCheckpointer(tmp_path, "main", max_to_keep=3, save_every=1)
  params, opt_state = small_state(0, m)
  with pytest.raises(ValueError, match="data_position=.* is not JSON"):
    ckpt.save(0, params, opt_state, key=jax.random.key(0),
              data_position=np.int64(3))
  with pytest.raises(ValueError, match="key=3: expected a JAX PRNG key"):
    ckpt.save(0, params, opt_state, key=3, data_position=0)
  ckpt.save(0, params, opt_state, key=jax.random.key(0), data_position=0)
  with pytest.raises(ValueError, match=r"target_params\['w'\] is ndarray "
                     "without a sharding"):
    ckpt.restore_latest({"w": np.zeros((8, 4), np.float32)}, opt_state)
  with pytest.raises(ValueError, match=r"step=7: expected one of the saved "
                     r"steps \[0\]"):
    ckpt.restore(7, params, opt_state)
  ckpt.close()
  with pytest.raises(ValueError, match="is closed"):
    ckpt.save(1, params, opt_state, key=jax.random.key(0), data_position=0)


# Saves steps 0 .. argv[2] - 1 of 1 MiB of params = step * ones, printing each
# step once its save has started (the previous one is then complete on disk),
# and exits without closing the checkpointer.
_WRITER = """
import sys, time
import jax, jax.numpy as jnp
from mgrpo_jax.runtime.checkpoints import AgentCheckpointer
ckpt = AgentCheckpointer(sys.argv[1], "main", max_to_keep=None, save_every=1)
for step in range(int(sys.argv[2])):
  ckpt.save(step, {"w": jnp.full((512, 512), step, jnp.float32)},
            {"count": jnp.int32(step)}, key=jax.random.key(step),
            data_position=10 * step, metadata={"step": step})
  print(step, flush=True)
  time.sleep(0.02)
"""


def writer(directory, steps):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.Popen(
      [sys.executable, "-c", _WRITER, str(directory), str(steps)],
      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)


def restore_written(directory):
  m = mesh(0)
  target = ({"w": jax.device_put(jnp.zeros((512, 512)),
                                 NamedSharding(m, P("fsdp")))},
            {"count": jax.device_put(jnp.int32(0), NamedSharding(m, P()))})
  with AgentCheckpointer(directory, "main",
                         max_to_keep=3, save_every=1) as ckpt:
    out = ckpt.restore_latest(*target)
  np.testing.assert_array_equal(out.params["w"], np.full((512, 512), out.step))
  assert int(out.opt_state["count"]) == out.step
  assert out.data_position == 10 * out.step
  assert out.metadata == {"step": out.step}
  np.testing.assert_array_equal(jax.random.key_data(out.key),
                                jax.random.key_data(jax.random.key(out.step)))
  return out


def test_exit_without_close_still_finishes_the_last_save(tmp_path):
  proc = writer(tmp_path, 2)
  proc.communicate(timeout=60)
  assert proc.returncode == 0
  assert sorted(os.listdir(tmp_path / "main")) == ["0", "1"]
  assert restore_written(tmp_path).step == 1


def test_sigkill_mid_run_resumes_from_the_latest_complete_step(tmp_path):
  proc = writer(tmp_path, 10_000)
  started, deadline = -1, time.monotonic() + 60
  try:
    while started < 4 and time.monotonic() < deadline:
      line = proc.stdout.readline()
      if not line:
        break
      started = int(line)
  finally:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
  assert started >= 4, "the writer never reached step 4"
  assert proc.returncode == -signal.SIGKILL

  # Step `started - 1` was complete when `started` was printed; later ones
  # may or may not have finished before the kill.
  assert restore_written(tmp_path).step >= started - 1
