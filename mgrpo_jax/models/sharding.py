"""The one table that decides how model parameters are sharded.

Parameters carry `logical_axes` metadata (see decoder.py). `RULES` maps each
logical axis name to a mesh axis: "fsdp" (data / fully-sharded data
parallel) or "tp" (tensor parallel). A dimension is sharded only when the mesh
has that axis and the axis size divides the dimension; otherwise it is
replicated (e.g. 3 key/value heads on a 2-way tensor-parallel mesh).
The sampling engine's KV cache follows the same table (`CACHE_AXES`,
`cache_sharding`): its programs are compiled for that placement.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

RULES: Mapping[str, str | None] = {
    "layers": None,   # the stacked-layer axis is never sharded
    "vocab": "tp",
    "embed": "fsdp",
    "heads": "tp",    # query heads x head width
    "kv": "tp",       # key/value heads x head width
    "mlp": "tp",
    # A mixture of experts' expert axis: experts split over the data axis
    # (expert parallelism; the embed axis of an expert's weights, which the
    # same mesh axis would shard, is then whole on each device).
    "experts": "fsdp",
    "norm": None,
}

# The mesh axis a training batch's rows are split over (data parallelism):
# the same axis that shards "embed", so on an "fsdp" mesh each device holds
# 1/n of the parameters and 1/n of the rows (FSDP).
BATCH_AXIS = "fsdp"


def partition_spec(logical_axes: tuple[str | None, ...], shape: tuple[int, ...],
                   mesh: Mesh, rules: Mapping[str, str | None] = RULES
                   ) -> PartitionSpec:
  """The PartitionSpec of one array under `rules` on `mesh`."""
  spec = []
  used = set()
  for name, size in zip(logical_axes, shape):
    axis = rules.get(name) if name is not None else None
    if (axis is None or axis not in mesh.shape or axis in used
        or size % mesh.shape[axis]):
      spec.append(None)
    else:
      spec.append(axis)
      used.add(axis)
  return PartitionSpec(*spec)


def undivided(abstract_state: nnx.State, mesh: Mesh,
              rules: Mapping[str, str | None] = RULES) -> list[str]:
  """One line per parameter dimension whose rule names an axis of `mesh`
  that does not divide it (so it is replicated instead), e.g. 6 experts on
  a 4-way data axis; [] when every rule applied."""
  out = []
  flat = nnx.to_flat_state(abstract_state)
  for path, variable in flat:
    axes = variable.get_metadata().get("logical_axes")
    if axes is None:
      continue
    used = set()
    for name, size in zip(axes, variable.shape):
      axis = rules.get(name) if name is not None else None
      if axis is None or axis not in mesh.shape or axis in used:
        continue
      if not size % mesh.shape[axis]:  # As partition_spec: applied.
        used.add(axis)
      else:
        out.append(f"{'.'.join(map(str, path))}: its {name} axis ({size}) "
                   f"is not divided by the mesh's {axis} axis "
                   f"({mesh.shape[axis]}), so it is replicated")
  return out


def state_shardings(abstract_state: nnx.State, mesh: Mesh,
                    rules: Mapping[str, str | None] = RULES) -> Any:
  """A NamedSharding for every variable of an (abstract) nnx.State."""

  def one(variable):
    axes = variable.get_metadata().get("logical_axes")
    shape = variable.shape if hasattr(variable, "shape") else np.shape(
        variable[...])
    if axes is None:
      axes = (None,) * len(shape)
    return NamedSharding(mesh, partition_spec(tuple(axes), tuple(shape), mesh,
                                              rules))

  return jax.tree.map(one, abstract_state,
                      is_leaf=lambda x: isinstance(x, nnx.Variable))


def place_state(state: nnx.State, mesh: Mesh,
                rules: Mapping[str, str | None] = RULES) -> nnx.State:
  """`state`'s values on `mesh`, each variable sharded by `rules`, wherever
  they are now: another mesh of this process (a copy, resharded), or a
  mesh over several processes whose other processes hold some of the
  shards (gathered to every process first: `mesh` is then this process's
  own, e.g. the devices its sampler runs on)."""
  leaves = jax.tree.leaves(state)
  if not all(getattr(x, "is_fully_addressable", True) for x in leaves):
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    state = multihost_utils.process_allgather(state, tiled=True)
  shardings = state_shardings(state, mesh, rules)
  return jax.device_put(state, shardings)


# The sampling engine's KV cache [L, R, G, S, Dh] (layers, conversation
# rows, key/value heads, slots, head width): key/value heads split like the
# projections that write them ("kv"); rows stay whole on every device (a
# decode step gathers its conversations' rows by index), and so do slots.
CACHE_AXES = ("layers", None, "kv", None, None)


def mesh_of(tree: Any) -> Mesh | None:
  """The mesh the committed leaves of `tree` are placed on: a NamedSharding's,
  or a one-device mesh of the device they were put on; None when no leaf is
  committed (a model never placed: JAX places it). Leaves on two meshes are
  an error."""
  meshes = set()
  for x in jax.tree.leaves(tree):
    if not getattr(x, "committed", False):
      continue
    if isinstance(x.sharding, NamedSharding):
      meshes.add(x.sharding.mesh)
    else:
      meshes.add(Mesh(np.array(sorted(x.sharding.device_set,
                                      key=lambda d: d.id)), ("fsdp",)))
  if len(meshes) > 1:
    raise ValueError(f"mesh_of: the leaves are on {len(meshes)} meshes "
                     f"({sorted(str(m.devices.tolist()) for m in meshes)}); "
                     "expected one.")
  return next(iter(meshes), None)


def cache_sharding(shape: tuple[int, ...], mesh: Mesh,
                   rules: Mapping[str, str | None] = RULES) -> NamedSharding:
  """Where a KV cache of `shape` lives on `mesh` (`CACHE_AXES`)."""
  return NamedSharding(mesh, partition_spec(CACHE_AXES, tuple(shape), mesh,
                                            rules))


def replicated(mesh: Mesh) -> NamedSharding:
  """A whole copy on every device of `mesh` (small inputs: keys, ids)."""
  return NamedSharding(mesh, PartitionSpec())
