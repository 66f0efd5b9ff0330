"""One device mesh per agent, from the `config.mesh` section.

M-GRPO trains each agent on its own devices (METHOD.md, "Decoupled
training"). The config names a section per agent: `main` and one per
sub-agent kind (e.g. `sub`, `verifier`), each asking for a number of devices
and a mesh shape over the axes "fsdp" and "tp" (the axes of
`models.sharding.RULES`):

  config.mesh.share = False
  config.mesh.main.devices = 4
  config.mesh.main.shape = "fsdp:2,tp:2"
  config.mesh.sub.devices = 4
  config.mesh.sub.shape = "fsdp:4"

`agent_meshes` gives `main` the first devices of `jax.devices()`, then each
other agent (in the config's sorted key order) the next consecutive slice, so
no two agents share a device. An agent may instead name its devices
(`device_ids`, JAX device ids); automatic slices skip devices claimed that
way. On a machine with too few devices (a laptop CPU, one GPU, Colab) set
`config.mesh.share = True`: then every agent's slice starts at the first
device and explicit ids may overlap, so agents share devices. Sharing is
never turned on silently: without it, too few devices is an error.

When one role runs as several processes (`runtime/distributed.py`),
`jax.devices()` lists the devices of all of them, and every process builds
and computes on every mesh of its role: so each agent's mesh must hold
devices of every process. A mesh left to one process's devices (e.g. main
and sub on disjoint slices of a two-process `--role=all`), or asking for
more devices than the processes have together, is refused, naming the
processes.

Each process samples (rolls out) on its own devices of the mesh
(`sampler_mesh`; `sampler_devices` of them, 0 = all): the learner's weights
are copied there when that is not the whole mesh.

Every problem (more devices asked for than exist, overlapping ids without
`share`) is a `ConfigError` raised before any compute, naming the field,
its value and what was expected.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import jax
import ml_collections
import numpy as np
from absl import logging
from jax.sharding import AxisType, Mesh
from ml_collections import config_dict

from mgrpo_jax.runtime.config_checks import ConfigError

AXES = ("fsdp", "tp")  # Mesh axis names, in mesh order (tp innermost).
SHARE = "share"  # The one non-agent field of the section.


def agent_config(devices: int = 1, shape: str = "",
                 device_ids: tuple[int, ...] | None = None
                 ) -> ml_collections.ConfigDict:
  """The mesh section of one agent (`config.mesh.<agent>`)."""
  config = ml_collections.ConfigDict()
  config.devices = devices  # How many devices this agent's mesh spans (>= 1).
  config.shape = shape  # "fsdp:2,tp:2" (product = devices); "": all on fsdp.
  config.device_ids = config_dict.placeholder(tuple)  # JAX device ids; None: next free slice.
  config.sampler_devices = 0  # Devices of each process that sample for the agent (0: all of its mesh's devices in that process; fewer: a copy of the weights goes there).
  if device_ids is not None:
    config.device_ids = tuple(device_ids)
  return config


def _fail(field: str, value: Any, expected: str) -> None:
  raise ConfigError(f"config.{field}={value!r}: expected {expected}.")


def _count(value: Any, field: str, what: str) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    _fail(field, value, f"an integer {what}")
  return int(value)


def parse_shape(shape: Any, devices: int, field: str) -> dict[str, int]:
  """Axis name -> size over `AXES` (missing axes have size 1).

  `shape` is "" / None (all devices on "fsdp"), a string "fsdp:2,tp:2", a
  tuple of sizes in `AXES` order ((2, 2)), a tuple of (name, size) pairs or a
  mapping name -> size. The product of the sizes must equal `devices`.
  """
  expected = (f"'' or a string like 'fsdp:2,tp:2' over the axes {AXES}, "
              f"with sizes multiplying to devices={devices}")
  if shape is None or shape == "" or shape == ():
    pairs = [("fsdp", devices)]
  elif isinstance(shape, str):
    pairs = []
    for part in shape.split(","):
      name, sep, size = part.partition(":")
      if not sep or not size.strip().isdigit():
        _fail(field, shape, expected)
      pairs.append((name.strip(), int(size)))
  elif isinstance(shape, Mapping):
    pairs = list(shape.items())
  elif isinstance(shape, Sequence) and all(
      isinstance(s, (int, np.integer)) and not isinstance(s, bool)
      for s in shape):
    if len(shape) > len(AXES):
      _fail(field, shape, f"at most {len(AXES)} sizes, one per axis {AXES}")
    pairs = list(zip(AXES, shape))
  elif isinstance(shape, Sequence) and all(
      isinstance(p, Sequence) and len(p) == 2 for p in shape):
    pairs = [tuple(p) for p in shape]
  else:
    _fail(field, shape, expected)
  sizes = {}
  for name, size in pairs:
    if name not in AXES:
      _fail(field, shape, f"axis names from {AXES}; got unknown axis {name!r}")
    if name in sizes:
      _fail(field, shape, f"each axis at most once; {name!r} is repeated")
    size = _count(size, field, f">= 1 for axis {name!r}")
    if size < 1:
      _fail(field, shape, f"axis sizes >= 1; {name!r} has {size}")
    sizes[name] = size
  product = math.prod(sizes.values())
  if product != devices:
    _fail(field, shape, f"axis sizes whose product ({product}) equals "
          f"devices={devices} (config.{field.rsplit('.', 1)[0]}.devices)")
  return {name: sizes.get(name, 1) for name in AXES}


def _agents(mesh_config: ml_collections.ConfigDict, field: str) -> list[str]:
  """Agent section names: `main` first, then the rest in sorted order."""
  names = []
  for key in mesh_config.keys():
    if key == SHARE:
      continue
    if not isinstance(mesh_config[key], (ml_collections.ConfigDict, Mapping)):
      _fail(f"{field}.{key}", mesh_config[key],
            f"an agent section with devices/shape/device_ids (the only other "
            f"field of config.{field} is '{SHARE}')")
    names.append(key)
  if not names:
    _fail(field, mesh_config, "at least one agent section, e.g. "
          f"config.{field}.main")
  return sorted(names, key=lambda n: (n != "main", n))


def _process(device: Any) -> int:
  """The JAX process that owns `device` (0 in a one-process run)."""
  return int(getattr(device, "process_index", 0))


def _processes(devices: Sequence[Any]) -> list[int]:
  return sorted({_process(d) for d in devices})


def _more_devices_hint(needed: int, devices: Sequence[Any],
                       share_field: str = "") -> str:
  processes = _processes(devices)
  if len(processes) > 1:
    here = sum(_process(d) == jax.process_index() for d in devices)
    hint = (f"only {len(devices)} device(s) exist across the "
            f"{len(processes)} processes of this role's jax.distributed "
            f"system ({here} of them in this process, process "
            f"{jax.process_index()}); a "
            "role's meshes span only the devices of the processes that "
            "joined it: start more processes (--num_processes) or give the "
            "agents fewer devices")
  else:
    hint = (f"only {len(devices)} device(s) exist. On CPU, get {needed} with "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={needed} or "
            f"jax.config.update('jax_num_cpu_devices', {needed}), set before "
            "JAX starts; another host's devices join only when this role's "
            "processes form one jax.distributed system (mgrpo_jax.main "
            "--distributed)")
  if share_field:
    hint += f"; or set config.{share_field}=True to let agents share devices"
  return hint


def _make_mesh(devices: list, sizes: dict[str, int]) -> Mesh:
  shape = tuple(sizes[a] for a in AXES)
  axis_types = (AxisType.Auto,) * len(AXES)
  try:
    # Orders devices by their physical topology where JAX knows it (TPU).
    return jax.make_mesh(shape, AXES, axis_types=axis_types, devices=devices)
  except (ValueError, NotImplementedError, AssertionError) as e:
    logging.info("jax.make_mesh(%s) failed (%s); using the devices in the "
                 "given order.", shape, e)
    return Mesh(np.array(devices, dtype=object).reshape(shape), AXES,
                axis_types=axis_types)


def agent_meshes(mesh_config: ml_collections.ConfigDict,
                 devices: Sequence[Any] | None = None, *,
                 field: str = "mesh") -> dict[str, Mesh]:
  """Agent name -> its Mesh over the axes ("fsdp", "tp"), all axes Auto.

  Args:
    mesh_config: the `config.mesh` section (see the module docstring).
    devices: the devices to split; default `jax.devices()`.
    field: the section's dotted path in the config, for error messages.

  Returns:
    A dict ordered `main` first, then the other agents in sorted order.

  Raises:
    ConfigError: naming the field, value and expectation, before any compute.
  """
  devices = list(jax.devices() if devices is None else devices)
  share = mesh_config.get(SHARE, False)
  if not isinstance(share, bool):
    _fail(f"{field}.{SHARE}", share, "True or False")
  by_id = {d.id: d for d in devices}

  # Validate every agent's section first; nothing is placed until all pass.
  plans = {}
  for name in _agents(mesh_config, field):
    section = mesh_config[name]
    base = f"{field}.{name}"
    count = _count(section.get("devices"), f"{base}.devices", ">= 1")
    if count < 1:
      _fail(f"{base}.devices", count, "an integer >= 1")
    if count > len(devices):
      _fail(f"{base}.devices", count,
            f"at most {len(devices)}, but "
            f"{_more_devices_hint(count, devices)}")
    sizes = parse_shape(section.get("shape"), count, f"{base}.shape")
    ids = section.get("device_ids")
    if ids is not None:
      ids = [_count(i, f"{base}.device_ids", ">= 0 per id") for i in ids]
      if len(ids) != count:
        _fail(f"{base}.device_ids", tuple(ids),
              f"{count} ids, one per device (config.{base}.devices={count})")
      if len(set(ids)) != len(ids):
        _fail(f"{base}.device_ids", tuple(ids), "distinct ids")
      unknown = [i for i in ids if i not in by_id]
      if unknown:
        _fail(f"{base}.device_ids", tuple(ids),
              f"ids of existing devices {sorted(by_id)}; {unknown} do not "
              f"exist (jax.devices() of {len(_processes(devices))} "
              "process(es): another host's devices are listed only when "
              "this role's processes form one jax.distributed system)")
    plans[name] = (count, sizes, ids)

  if not share:
    claimed: dict[int, str] = {}
    for name, (_, _, ids) in plans.items():
      for i in ids or ():
        if i in claimed:
          _fail(f"{field}.{name}.device_ids", tuple(ids),
                f"ids not used by another agent; device {i} is also in "
                f"config.{field}.{claimed[i]}.device_ids (set config.{field}."
                f"{SHARE}=True to share devices on purpose)")
        claimed[i] = name
    total = sum(count for count, _, _ in plans.values())
    if total > len(devices):
      asked = " + ".join(f"{n}.devices={c}" for n, (c, _, _) in plans.items())
      raise ConfigError(
          f"config.{field}: {asked} requests {total} devices in all: expected "
          f"at most {len(devices)} for disjoint agent meshes, but "
          f"{_more_devices_hint(total, devices, f'{field}.{SHARE}')}.")

  chosen = {}
  explicit = {i for _, _, ids in plans.values() for i in ids or ()}
  free = [d for d in devices if d.id not in explicit]  # For disjoint slices.
  for name, (count, _, ids) in plans.items():
    if ids is not None:
      chosen[name] = [by_id[i] for i in ids]
    elif share:
      chosen[name] = devices[:count]
    else:
      chosen[name], free = free[:count], free[count:]
    _check_processes(chosen[name], devices, f"{field}.{name}")
  return {name: _make_mesh(chosen[name], sizes)
          for name, (_, sizes, _) in plans.items()}


def _check_processes(chosen: Sequence[Any], devices: Sequence[Any],
                     field: str) -> None:
  """A ConfigError when the mesh of `field` leaves out some process: every
  process of a multi-process role computes on every mesh it builds (each
  process finds the same answer, so all of them stop)."""
  processes = _processes(devices)
  held = _processes(chosen)
  left_out = [p for p in processes if p not in held]
  if not left_out:
    return
  counts = ", ".join(f"{p}: {sum(_process(d) == p for d in devices)}"
                     for p in processes)
  raise ConfigError(
      f"config.{field}: its mesh's devices {sorted(d.id for d in chosen)} "
      f"belong to process(es) {held} only; expected devices of every "
      f"process of this role's jax.distributed system (devices per "
      f"process: {counts}), "
      f"but process(es) {left_out} hold none of them and could not take "
      f"part in its computations: give config.{field}.devices (or "
      "device_ids) devices of every process, or run this agent as its own "
      "role (--role) with its own processes.")


def sampler_mesh(mesh: Mesh, devices: int = 0) -> Mesh:
  """The mesh an agent's sampler runs on: this process's devices of the
  agent's `mesh` (the first `devices` of them; 0: all). With one process
  and every device this is `mesh` itself; otherwise a mesh of the same axes
  with its tensor-parallel size kept where it divides the device count, the
  rest on "fsdp". Each process samples on its own devices, so rollouts
  split over the processes never wait for each other."""
  mine = [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
  if isinstance(devices, bool) or not isinstance(devices, int) or not (
      0 <= devices <= len(mine)):
    raise ConfigError(f"sampler devices={devices!r}: expected an integer in "
                      f"0 .. {len(mine)} (this process's devices of the "
                      "agent's mesh; 0 = all).")
  chosen = mine[:devices] if devices else mine
  if len(chosen) == mesh.devices.size:
    return mesh
  tp = mesh.shape["tp"] if len(chosen) % mesh.shape["tp"] == 0 else 1
  return _make_mesh(chosen, {"fsdp": len(chosen) // tp, "tp": tp})


def describe(meshes: Mapping[str, Mesh]) -> str:
  """One line per agent: its axis sizes and device ids (for logs)."""
  return "\n".join(
      f"{name}: " + " ".join(f"{a}={s}" for a, s in mesh.shape.items())
      + f" on devices {sorted(d.id for d in mesh.devices.flat)}"
      for name, mesh in meshes.items())
