"""The one update shared by RL and SFT: accumulation inside jit, the
skipped update, rows split over a mesh's data axis."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from mgrpo_jax.train import update


def _loss(params, xs):
  x_MxD, y_M = xs
  err_M = x_MxD @ params["w"] + params["b"] - y_M
  return jnp.sum(err_M ** 2) / 16.0, jnp.sum(jnp.abs(err_M))


def _data(seed=0):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(16, 3)).astype(np.float32),
          rng.normal(size=16).astype(np.float32))


PARAMS = {"w": jnp.array([0.5, -1.0, 2.0]), "b": jnp.float32(0.1)}


@pytest.mark.parametrize("micro", [1, 4, 16])
def test_accumulated_gradient_is_the_whole_batch_gradient(micro):
  x, y = _data()
  xs_U = (update.split_rows(x, micro), update.split_rows(y, micro))
  grads, values_U, aux_U = jax.jit(
      lambda p, xs: update.accumulate(_loss, p, xs))(PARAMS, xs_U)
  assert values_U.shape == aux_U.shape == (16 // micro,)
  (whole, aux), want = jax.value_and_grad(_loss, has_aux=True)(PARAMS, (x, y))
  assert float(jnp.sum(values_U)) == pytest.approx(float(whole), rel=1e-5)
  assert float(jnp.sum(aux_U)) == pytest.approx(float(aux), rel=1e-5)
  chex.assert_trees_all_close(grads, want, rtol=1e-5, atol=0)


def test_a_skipped_update_keeps_weights_and_state_bit_for_bit():
  optimizer = optax.adam(0.1)
  x, y = _data()
  xs_U = (update.split_rows(x, 4), update.split_rows(y, 4))
  step = jax.jit(lambda p, s, xs, apply: update.update(
      optimizer, _loss, p, s, xs, apply))
  params, state, *_ = step(PARAMS, optimizer.init(PARAMS), xs_U, True)
  kept, kept_state, norm, *_ = step(params, state, xs_U, False)
  assert float(norm) > 0  # The gradient is still computed.
  chex.assert_trees_all_equal((params, state), (kept, kept_state))
  moved, *_ = step(params, state, xs_U, True)
  assert not np.array_equal(moved["w"], params["w"])


def test_rows_go_over_the_data_axis_only():
  mesh = jax.make_mesh((4, 2), ("fsdp", "tp"), devices=jax.devices()[:8],
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  x_UxMxT = update.put_rows(np.zeros((3, 8, 5), np.int32), mesh)
  assert {s.data.shape for s in x_UxMxT.addressable_shards} == {(3, 2, 5)}
  assert update.put_rows(None, mesh) is None
  assert update.rows_sharding(None, 3) is None
  assert update.data_parallelism(mesh) == 4 and update.data_parallelism(
      None) == 1


def test_bad_splits_are_named():
  with pytest.raises(ValueError, match="10 rows are not a multiple of "
                     "micro_batch=4"):
    update.split_rows(np.zeros((10, 2)), 4)
  mesh = jax.make_mesh((4, 1), ("fsdp", "tp"), devices=jax.devices()[:4],
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  with pytest.raises(ValueError, match=r"sft.batch_size=6: expected a "
                     r"multiple of .*fsdp=4.*e.g. sft.batch_size=8"):
    update.check_micro_batch(6, mesh, "sft.batch_size")
  update.check_micro_batch(8, mesh, "sft.batch_size")
