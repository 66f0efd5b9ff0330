"""The one optimizer update, shared by the RL learner and SFT.

Both train the same way: a batch of N packed rows is split into U
micro-batches of M rows ([N, ...] -> [U, M, ...]); inside one jitted call a
`lax.scan` sums each micro-batch's gradient of `loss_fn` (each already
divided by the whole batch's denominator, so every token weighs the same
whatever micro-batch it fell in), then applies one optax update. Only the
loss differs: it is passed in.

On a mesh the rows of every micro-batch are sharded over the data axis
(`models.sharding.BATCH_AXIS`): each device computes 1/n of the rows, XLA
sums the gradient across devices, and the parameters keep their own
sharding (`models.sharding.RULES`). M must be a multiple of that axis'
size (`rows_sharding` says so).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mgrpo_jax.models.sharding import BATCH_AXIS

# loss_fn(params, xs) -> (loss, aux): xs holds one micro-batch's arrays
# (leading axis M), aux any pytree of per-micro-batch figures.
LossFn = Callable[[Any, Any], tuple[jax.Array, Any]]


def accumulate(loss_fn: LossFn, params: Any, xs_U: Any
               ) -> tuple[Any, jax.Array, Any]:
  """(summed gradient, loss of each micro-batch [U], aux stacked over U)
  of `loss_fn` over the micro-batches of `xs_U` (leading axis U)."""

  def micro(grads, xs):
    (value, aux), g = jax.value_and_grad(loss_fn, has_aux=True)(params, xs)
    return jax.tree.map(jnp.add, grads, g), (value, aux)

  zeros = jax.tree.map(jnp.zeros_like, params)
  grads, (values_U, aux_U) = jax.lax.scan(micro, zeros, xs_U)
  return grads, values_U, aux_U


def update(optimizer: optax.GradientTransformation, loss_fn: LossFn,
           params: Any, opt_state: optax.OptState, xs_U: Any,
           apply: jax.Array | bool = True
           ) -> tuple[Any, optax.OptState, jax.Array, jax.Array, Any]:
  """One update over the micro-batches of `xs_U`: (params, opt_state,
  gradient norm, losses [U], aux over U). `apply` False (a traced bool is
  fine) returns the parameters and optimizer state unchanged, bit for bit:
  the gradient and figures are still computed."""
  grads, values_U, aux_U = accumulate(loss_fn, params, xs_U)
  updates, new_state = optimizer.update(grads, opt_state, params)
  new_params = optax.apply_updates(params, updates)
  if apply is not True:
    keep = lambda new, old: jnp.where(apply, new, old)
    new_params = jax.tree.map(keep, new_params, params)
    new_state = jax.tree.map(keep, new_state, opt_state)
  return new_params, new_state, optax.tree.norm(grads), values_U, aux_U


def split_rows(x_NxD: np.ndarray, micro_batch: int) -> np.ndarray:
  """[N, ...] -> [N / micro_batch, micro_batch, ...] (N a multiple)."""
  n = x_NxD.shape[0]
  if n % micro_batch:
    raise ValueError(f"split_rows: {n} rows are not a multiple of "
                     f"micro_batch={micro_batch}.")
  return x_NxD.reshape(n // micro_batch, micro_batch, *x_NxD.shape[1:])


def data_parallelism(mesh: Mesh | None) -> int:
  """How many ways the rows of a micro-batch are split on `mesh`."""
  return 1 if mesh is None else int(mesh.shape.get(BATCH_AXIS, 1))


def check_micro_batch(micro_batch: int, mesh: Mesh | None,
                      field: str) -> None:
  """A ValueError naming `field` when `micro_batch` rows cannot be split
  evenly over the mesh's data axis."""
  ways = data_parallelism(mesh)
  if micro_batch % ways:
    raise ValueError(
        f"{field}={micro_batch}: expected a multiple of the mesh's data "
        f"axis ({BATCH_AXIS}={ways}), so each device holds the same number "
        f"of rows; e.g. {field}={-(-micro_batch // ways) * ways}.")


def rows_sharding(mesh: Mesh | None, ndim: int, row_axis: int = 1
                  ) -> NamedSharding | None:
  """Where a [U, M, ...] (or [M, ...] with row_axis 0) batch array goes:
  its rows over the data axis, the rest replicated (None: no mesh)."""
  if mesh is None:
    return None
  spec = [None] * ndim
  if data_parallelism(mesh) > 1:
    spec[row_axis] = BATCH_AXIS
  return NamedSharding(mesh, PartitionSpec(*spec))


def put_rows(x: np.ndarray | None, mesh: Mesh | None, row_axis: int = 1
             ) -> jax.Array | None:
  """`x` on the device(s), rows sharded by `rows_sharding` (None stays
  None)."""
  if x is None:
    return None
  sharding = rows_sharding(mesh, np.ndim(x), row_axis)
  if sharding is None:
    return jnp.asarray(x)
  # Every process holds the whole batch: each places its own devices'
  # rows (no cross-process transfer or equality check).
  x = np.asarray(x)
  return jax.make_array_from_callback(x.shape, sharding, lambda i: x[i])


def put_process_rows(x: np.ndarray | None, mesh: Mesh | None,
                     processes: int) -> jax.Array | None:
  """This process's columns `x` [U, M / P, ...] of a [U, M, ...] batch
  whose P processes each packed their own (train/shards.py), as the global
  array: rows sharded by `rows_sharding`, each process's columns on its
  own devices (no process sees the others' rows)."""
  if x is None:
    return None
  if mesh is None:
    raise ValueError("put_process_rows: a batch packed by several processes "
                     "needs the mesh they share.")
  sharding = rows_sharding(mesh, np.ndim(x), 1)
  shape = (x.shape[0], x.shape[1] * processes, *x.shape[2:])
  return jax.make_array_from_process_local_data(sharding, np.asarray(x),
                                                shape)
