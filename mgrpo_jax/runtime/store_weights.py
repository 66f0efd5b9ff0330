"""The store's published weights (runtime/store.py's `Store` holds them):
one Orbax checkpoint per version under `<root>/weights/<agent>/<step>/`,
written by the agent's learner, read by any number of samplers."""

from __future__ import annotations

import re
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from mgrpo_jax.runtime.checkpoints import multiprocess_options
from mgrpo_jax.runtime.store_codec import is_count
from mgrpo_jax.runtime.store_files import StoreError

_WEIGHTS = "weights"
_STEP_DIGITS = 10  # Zero-padded step directories list in step order.
AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_DELETED_BY = ("old versions are deleted by the writer's int keep_weights or "
               "by prune_weights")


def step_name(step: int) -> str:
  if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
    raise StoreError(f"step={step!r}: expected a non-negative integer.")
  if step < 0:
    raise StoreError(f"step={step}: expected a non-negative integer.")
  return f"{int(step):0{_STEP_DIGITS}d}"



class PublishedWeights:
  """The weights half of `Store` (it sets `_files`, `_keep_weights`, the
  manager dicts and `_write_fingerprint`)."""

  def _weights_dir(self, agent: str) -> str:
    if not isinstance(agent, str) or not AGENT_NAME.fullmatch(agent):
      raise StoreError(f"agent={agent!r}: expected a name of letters, digits, "
                       "'_', '.' or '-'.")
    return self._files.url(f"{_WEIGHTS}/{agent}")

  def _weight_writer(self, agent: str) -> ocp.CheckpointManager:
    """The manager that publishes (and deletes) `agent`'s weights."""
    writer = self._weight_writers.get(agent)
    if writer is None:
      writer = ocp.CheckpointManager(
          self._weights_dir(agent),
          options=ocp.CheckpointManagerOptions(
              max_to_keep=self._keep_weights, create=True,
              enable_async_checkpointing=False,
              multiprocessing_options=multiprocess_options(
                  f"store.publish.{agent}")))
      self._weight_writers[agent] = writer
    return writer

  def publish_weights(self, agent: str, step: int, params: Any) -> None:
    """Saves `params` (a pytree of arrays) as `agent`'s weights at `step`.

    Blocks until the version is committed; then, if `keep_weights` is an
    int, deletes all but the last `keep_weights` versions. Steps must
    increase from one call to the next.
    """
    step_name(step)
    writer = self._weight_writer(agent)
    latest = writer.latest_step()
    if latest is not None and step <= latest:
      raise StoreError(f"weights of agent {agent!r}: step={step} is not after "
                       "the latest published step "
                       f"{latest} in {self._weights_dir(agent)}.")
    self._write_fingerprint()
    writer.save(int(step), args=ocp.args.StandardSave(params), force=True)
    writer.wait_until_finished()

  def prune_weights(self, agent: str, keep_from: int,
                    keep_newest: int = 0) -> list[int]:
    """Deletes `agent`'s versions older than `keep_from`, but never any of
    the `keep_newest` newest; returns the deleted steps, ascending.

    For the trainer, which knows the oldest version a resume from its kept
    checkpoints needs; call it in the process that publishes `agent`'s
    weights. Readers re-list, so deletions never break them.
    """
    for field, value in (("keep_from", keep_from),
                         ("keep_newest", keep_newest)):
      if not is_count(value):
        raise StoreError(f"{field}={value!r}: expected a non-negative "
                         "integer.")
    writer = self._weight_writer(agent)
    self._files.forget_listings()
    writer.reload()
    steps = sorted(writer.all_steps())
    newest = steps[max(len(steps) - keep_newest, 0):]
    deleted = [s for s in steps if s < keep_from and s not in newest]
    for step in deleted:
      writer.delete(step)
    return deleted

  def _weight_reader(self, agent: str) -> ocp.CheckpointManager | None:
    """A read-only manager over `agent`'s weights, re-listed from storage."""
    directory = self._weights_dir(agent)
    self._files.forget_listings()
    reader = self._weight_readers.get(agent)
    if reader is None:
      if not ocp.utils.checkpoint_steps(directory):
        return None
      reader = ocp.CheckpointManager(
          directory, item_handlers=ocp.PyTreeCheckpointHandler(),
          options=ocp.CheckpointManagerOptions(
              read_only=True, create=False, save_interval_steps=0,
              multiprocessing_options=multiprocess_options(
                  f"store.read.{agent}")))
      self._weight_readers[agent] = reader
    else:
      reader.reload()
    return reader

  def latest_weights_step(self, agent: str) -> int | None:
    """The newest committed version of `agent`'s weights, or None."""
    reader = self._weight_reader(agent)
    return None if reader is None else reader.latest_step()

  def load_weights(self, agent: str, step: int, target: Any = None) -> Any:
    """Loads `agent`'s weights at `step`.

    Args:
      agent: the agent's name, as published.
      step: a version listed by `latest_weights_step`.
      target: optional pytree of the same structure whose leaves are
        `jax.ShapeDtypeStruct`s (or arrays) with shardings: the weights are
        restored onto those shardings and dtypes. Without it, plain host
        numpy arrays in nested dicts.

    Raises:
      StoreError: no such version (never published, or already deleted by
        the writer's `keep_weights` or by `prune_weights`).
    """
    step_name(step)
    reader = self._weight_reader(agent)
    steps = [] if reader is None else list(reader.all_steps())
    if step not in steps:
      raise StoreError(
          f"weights of agent {agent!r} at step {step} are not in "
          f"{self._weights_dir(agent)} (available: {sorted(steps)}); "
          f"{_DELETED_BY}.")
    try:
      if target is None:
        metadata = reader.item_metadata(step)
        tree = getattr(metadata, "tree", metadata)
        restore_args = jax.tree.map(
            lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
        args = ocp.args.PyTreeRestore(restore_args=restore_args)
      else:
        args = ocp.args.PyTreeRestore(
            item=target,
            restore_args=ocp.checkpoint_utils.construct_restore_args(target))
      return reader.restore(step, args=args)
    except (FileNotFoundError, ValueError) as e:
      self._files.forget_listings()
      reader.reload()
      if step not in reader.all_steps():
        raise StoreError(
            f"weights of agent {agent!r} at step {step} were deleted while "
            f"loading ({_DELETED_BY}); load the latest again.") from e
      raise StoreError(f"could not load weights of agent {agent!r} at step "
                       f"{step} from {self._weights_dir(agent)}: {e}") from e
