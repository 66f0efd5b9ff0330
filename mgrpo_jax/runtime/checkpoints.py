"""Per-agent Orbax checkpoints, and resuming from the latest complete one.

Each agent (main, each sub-agent kind) checkpoints into its own directory,
`<directory>/<agent>/<step>/`, with everything a run needs to continue exactly
where it stopped:
  state/  parameters and optimizer state (any pytree of jax.Arrays, e.g. an
          nnx.State and an optax state), written shard by shard;
  meta/   JSON: the step, the data position (any JSON value), the PRNG key
          (its raw uint32 data, from `jax.random.key_data`, and its impl
          name) and a dict of extra metadata.

`step` is the number of training steps completed, so a resumed run continues
with step `restored.step`.

Saves are asynchronous (training goes on while the files are written) and
atomic: Orbax writes `<step>.orbax-checkpoint-tmp*` and renames it to
`<step>` when complete (on gs:// it writes a commit_success.txt marker
last). A process killed mid-save leaves only such a temporary directory,
which is never listed as a step, so resuming ignores it (and removes it when
the next checkpointer opens the directory). `close()` (or leaving a `with`
block, or a normal interpreter exit) waits for the save in flight.

Restoring takes the target parameters and optimizer state (jax.Arrays or
`jax.ShapeDtypeStruct`s with a sharding) and reads every array straight onto
its target sharding, i.e. onto the agent's mesh, whatever mesh saved it.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import re
import threading
import weakref
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from etils import epath

_AGENT_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclasses.dataclass
class Restored:
  """What one checkpoint holds, restored."""
  step: int  # Training steps completed when it was saved.
  params: Any  # Like target_params, on the target shardings.
  opt_state: Any  # Like target_opt_state, on the target shardings.
  key: jax.Array  # The PRNG key as saved (typed or raw uint32), default device.
  data_position: Any  # The JSON value saved (tuples come back as lists).
  metadata: dict[str, Any]  # The extra JSON metadata given to save.


def _json(value: Any, what: str) -> Any:
  try:
    json.dumps(value, allow_nan=False)
  except (TypeError, ValueError) as e:
    raise ValueError(f"AgentCheckpointer.save: {what}={value!r} is not JSON: "
                     f"expected numbers, strings, bools, None and lists / "
                     f"dicts (str keys) of them ({e}).") from None
  return value


def _key_record(key: Any) -> dict[str, Any]:
  """The key as JSON: raw uint32 data (nested lists) and its impl name."""
  if not isinstance(key, jax.Array):
    raise ValueError(f"AgentCheckpointer.save: key={key!r}: expected a JAX "
                     "PRNG key (jax.random.key, or jax.random.PRNGKey's "
                     "uint32 data).")
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    return {"data": np.asarray(jax.random.key_data(key)).tolist(),
            "impl": str(jax.random.key_impl(key))}
  if key.dtype != jnp.uint32:
    raise ValueError(f"AgentCheckpointer.save: key has dtype {key.dtype}: "
                     "expected a typed PRNG key or raw uint32 key data.")
  return {"data": np.asarray(key).tolist(), "impl": None}


def _key_from_record(record: dict[str, Any]) -> jax.Array:
  data = jnp.asarray(np.asarray(record["data"], dtype=np.uint32))
  if record["impl"] is None:
    return data
  return jax.random.wrap_key_data(data, impl=record["impl"])


def _abstract(tree: Any, name: str) -> Any:
  """`tree` as ShapeDtypeStructs carrying each leaf's sharding."""

  def one(path, leaf):
    sharding = getattr(leaf, "sharding", None)
    if sharding is None or not hasattr(leaf, "shape"):
      raise ValueError(
          f"AgentCheckpointer.restore: {name}{jax.tree_util.keystr(path)} is "
          f"{type(leaf).__name__} without a sharding: expected jax.Arrays on "
          "the agent's mesh or jax.ShapeDtypeStruct(shape, dtype, "
          "sharding=NamedSharding(mesh, spec)).")
    return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)

  return jax.tree_util.tree_map_with_path(one, tree)


def multiprocess_options(name: str) -> ocp.options.MultiprocessingOptions:
  """Orbax's options for a manager that the processes of a role open
  together: process 0 is the primary host (it alone lists, finalises and
  deletes steps) and the manager's barriers carry `name`, so that two
  managers saving at once (two agents' checkpoints, a checkpoint and a
  weight publication) never meet at each other's barrier."""
  return ocp.options.MultiprocessingOptions(
      primary_host=0, barrier_sync_key_prefix=name.replace("/", "."))


def _close_at_exit(checkpointer: AgentCheckpointer) -> None:
  """Closes `checkpointer` (finishing its save) when the interpreter exits.

  A plain `atexit` hook runs too late: by then `concurrent.futures` refuses
  new work, and Orbax's background save dies before its final rename. Hooks
  of `threading._register_atexit` run earlier (the newest first, so before
  the executors shut down), while Orbax's threads still work.
  """
  ref = weakref.ref(checkpointer)

  def hook():
    alive = ref()
    if alive is not None:
      alive.close()

  getattr(threading, "_register_atexit", atexit.register)(hook)


class AgentCheckpointer:
  """Saves and restores one agent's training state (see module docstring).

  Args:
    directory: the run's checkpoint root (local path or gs://); this agent
      writes to `directory/agent`.
    agent: the agent's name, e.g. "main" or "sub" (a directory name).
    max_to_keep: newest checkpoints kept on disk; older ones are deleted
      after each save. None keeps all. (A run's values, with their defaults,
      are config.checkpoint.max_to_keep and .every.)
    save_every: `save` writes only steps that are multiples of this (or when
      forced, e.g. the last step).
    keep_steps: steps kept whatever `max_to_keep` says (the trainer keeps
      step 0, the warm start, so it can be evaluated after the run).
  """

  def __init__(self, directory: str | epath.PathLike, agent: str, *,
               max_to_keep: int | None, save_every: int,
               keep_steps: Sequence[int] = ()):
    if not isinstance(agent, str) or not _AGENT_NAME.fullmatch(agent) or (
        agent in (".", "..")):
      raise ValueError(f"AgentCheckpointer: agent={agent!r}: expected a "
                       "directory name of letters, digits, '_', '-', '.'.")
    if max_to_keep is not None and (
        not isinstance(max_to_keep, int) or max_to_keep < 1):
      raise ValueError(f"AgentCheckpointer: max_to_keep={max_to_keep!r}: "
                       "expected an integer >= 1, or None to keep all.")
    if not isinstance(save_every, int) or save_every < 1:
      raise ValueError(f"AgentCheckpointer: save_every={save_every!r}: "
                       "expected an integer >= 1.")
    self.agent, self.save_every = agent, save_every
    self.directory = epath.Path(directory) / agent
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0
           for s in keep_steps):
      raise ValueError(f"AgentCheckpointer: keep_steps={keep_steps!r}: "
                       "expected integers >= 0.")
    preservation = None
    if keep_steps and max_to_keep is not None:  # The newest N, and these.
      policies = ocp.checkpoint_managers.preservation_policy
      preservation = policies.AnyPreservationPolicy([
          policies.LatestN(max_to_keep),
          policies.CustomSteps(sorted(keep_steps))])
    options = ocp.CheckpointManagerOptions(
        max_to_keep=None if preservation else max_to_keep, create=True,
        cleanup_tmp_directories=True, enable_async_checkpointing=True,
        preservation_policy=preservation,
        multiprocessing_options=multiprocess_options(f"checkpoint.{agent}"))
    self._manager = ocp.CheckpointManager(self.directory, options=options)
    self._closed = False
    _close_at_exit(self)

  # ------------------------------------------------------------------ query

  def steps(self) -> list[int]:
    """Steps of the checkpoints on disk (and a save in flight), ascending."""
    return sorted(self._manager.all_steps())

  def latest_step(self) -> int | None:
    """The newest step (a save in flight counts), or None if there is none."""
    return self._manager.latest_step()

  def should_save(self, step: int, *, force: bool = False) -> bool:
    """Whether `save(step, ..., force=force)` writes a checkpoint."""
    return force or step % self.save_every == 0

  # ------------------------------------------------------------------- save

  def save(self, step: int, params: Any, opt_state: Any, *, key: jax.Array,
           data_position: Any, metadata: dict[str, Any] | None = None,
           force: bool = False) -> bool:
    """Starts saving one step; returns whether it was saved (`should_save`).

    The arrays are copied off the devices before this returns; the files
    are written in the background (see `wait_until_finished`).

    Args:
      step: training steps completed (>= 0, after the latest saved step).
      params: the parameters, a pytree of jax.Arrays (e.g. an nnx.State).
      opt_state: the optax optimizer state.
      key: the run's PRNG key (typed, or raw uint32 data).
      data_position: where the data stream stands, any JSON value.
      metadata: extra JSON (str keys), e.g. config or metric snapshots.
      force: save even if `step` is not a multiple of save_every.
    """
    self._check_open("save")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
      raise ValueError(f"AgentCheckpointer.save: step={step!r}: expected an "
                       "integer >= 0.")
    latest = self.latest_step()
    if latest is not None and step <= latest:
      raise ValueError(f"AgentCheckpointer.save: step={step}: expected a step "
                       f"after the latest checkpoint {latest} in "
                       f"{self.directory} (a resumed run continues with step "
                       "restored.step).")
    if not self.should_save(step, force=force):
      return False
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict):
      raise ValueError(f"AgentCheckpointer.save: metadata={metadata!r}: "
                       "expected a dict.")
    meta = {"agent": self.agent, "step": step,
            "data_position": _json(data_position, "data_position"),
            "key": _key_record(key), "metadata": _json(metadata, "metadata")}
    args = ocp.args.Composite(
        state=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
        meta=ocp.args.JsonSave(meta))
    # The save cadence is decided above; `force` stops Orbax's own policy
    # (e.g. "always save the first step") from overriding it.
    return self._manager.save(step, args=args, force=True)

  # ---------------------------------------------------------------- restore

  def restore(self, step: int, target_params: Any, target_opt_state: Any
              ) -> Restored:
    """The checkpoint of `step`, its arrays on the targets' shardings."""
    self._check_open("restore")
    self._manager.wait_until_finished()
    if step not in self.steps():
      raise ValueError(f"AgentCheckpointer.restore: step={step!r}: expected "
                       f"one of the saved steps {self.steps()} in "
                       f"{self.directory}.")
    target = {"params": _abstract(target_params, "target_params"),
              "opt_state": _abstract(target_opt_state, "target_opt_state")}
    out = self._manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()))
    meta = out.meta
    return Restored(step=int(meta["step"]), params=out.state["params"],
                    opt_state=out.state["opt_state"],
                    key=_key_from_record(meta["key"]),
                    data_position=meta["data_position"],
                    metadata=meta["metadata"])

  def restore_latest(self, target_params: Any, target_opt_state: Any
                     ) -> Restored | None:
    """The newest complete checkpoint (see `restore`), or None if none."""
    self._check_open("restore_latest")
    self._manager.wait_until_finished()
    step = self.latest_step()
    if step is None:
      return None
    return self.restore(step, target_params, target_opt_state)

  def discard_after(self, step: int | None) -> list[int]:
    """Deletes the checkpoints newer than `step` (all of them for None);
    returns their steps. A run whose agents were killed between their saves
    resumes all agents from the newest step they share, redoing the rest."""
    self._check_open("discard_after")
    self._manager.wait_until_finished()
    newer = [s for s in self.steps() if step is None or s > step]
    for s in newer:
      self._manager.delete(s)
    self._manager.reload()
    return newer

  # -------------------------------------------------------------- lifetime

  def wait_until_finished(self) -> None:
    """Blocks until the save in flight (if any) is on disk."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    """Finishes the save in flight and releases Orbax's threads."""
    if self._closed:
      return
    self._closed = True
    self._manager.wait_until_finished()
    self._manager.close()

  def _check_open(self, method: str) -> None:
    if self._closed:
      raise ValueError(f"AgentCheckpointer.{method}: the checkpointer of "
                       f"{self.directory} is closed.")

  def __enter__(self) -> AgentCheckpointer:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
