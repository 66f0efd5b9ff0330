"""The shared store through which decoupled agents exchange data.

M-GRPO trains each agent on its own mesh, possibly in its own process or
slice; the sides share no RPC, only this store (METHOD.md, "Decoupled
training"). It holds two kinds of data under one root:

  <root>/fingerprint.json          config fields both sides must agree on,
                                   written with a start's first data
  <root>/steps/<step>/             one step record, written once:
      arrays.npz                     dict[str, np.ndarray] (.npz, no pickle)
      meta.json                      a JSON dict
      COMMITTED                      gs:// only: written last
  <root>/weights/<agent>/<step>/   one Orbax checkpoint per published version

The root is a local (or shared-file-system) directory, or `gs://bucket/prefix`.
Both backends give the same guarantee: a reader never sees half a step.
  * local: a step is written into a hidden temporary directory, then renamed
    into place (`os.rename` is atomic within a file system);
  * gs://: the data objects are written first and a `COMMITTED` marker
    object last; readers trust only steps that have the marker.
Weights go through Orbax, whose own commit protocol (temporary directory, or
`commit_success.txt` on GCS) hides unfinished versions. The writer keeps
every version until `Store.prune_weights` deletes it (or, with an int
`keep_weights`, only the last that many); readers open the directory
read-only and list it afresh on every call, so a deleted version never breaks
a reader that asks for the latest one.

A local root needs no hard links (gcsfuse and other FUSE mounts lack them):
creating the fingerprint falls back to an exclusive-create lock file and a
rename. Temporaries a crashed writer left (hidden `.tmp-`, `.probe-`, `.lock-`
entries, Orbax's `*.orbax-checkpoint-tmp` directories; on gs://, `.probe-`
objects) are removed when a store opens, once older than
`STALE_TEMPORARY_AGE_S`; no listing ever shows them. A committed record whose
files are corrupt raises StoreError naming the file: delete that step's
directory and the main side writes it again.

Each step has one writer (the main side) and each agent's weights one writer
(that agent's learner); any number of readers.

gs:// needs `gcsfs` (Orbax reaches GCS directories through etils.epath and
fsspec); step records use tensorstore's `gcs` key-value store. Both use the
machine's Google credentials. gcsfs caches directory listings for the life of
a process: the store forgets them before every read, so it sees what another
process wrote or deleted.
"""

from __future__ import annotations

import abc
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
import zipfile
from typing import Any, Callable

from absl import logging
import jax
import numpy as np
import orbax.checkpoint as ocp

_FINGERPRINT = "fingerprint.json"
_STEPS = "steps"
_WEIGHTS = "weights"
_ARRAYS = "arrays.npz"
_META = "meta.json"
_COMMITTED = "COMMITTED"
_STEP_DIGITS = 10  # Zero-padded step directories list in step order.
_AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_ABSENT = "<absent>"
# Temporaries older than this when a store opens were left by a crashed
# writer (a live one finishes within seconds) and are removed.
STALE_TEMPORARY_AGE_S = 3600.0
_TEMPORARY_PREFIXES = (".tmp-", ".probe-", ".lock-")
_ORBAX_TEMPORARY = ".orbax-checkpoint-tmp"
# How long `create` waits for another creator's lock before giving up.
_LOCK_WAIT_S = 30.0
_DELETED_BY = ("old versions are deleted by the writer's int keep_weights or "
               "by prune_weights")
# What decoding a damaged .npz or JSON file raises.
_CORRUPT = (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError)


class StoreError(Exception):
  """A store that cannot be used as asked (unwritable, incompatible, ...)."""


class StoreTimeout(StoreError):
  """`Store.read_step` waited `timeout_s` and the step never appeared."""


def _is_temporary(name: str) -> bool:
  """Whether a directory entry is a store's (or Orbax's) temporary."""
  return name.startswith(_TEMPORARY_PREFIXES) or _ORBAX_TEMPORARY in name


def _step_name(step: int) -> str:
  if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
    raise StoreError(f"step={step!r}: expected a non-negative integer.")
  if step < 0:
    raise StoreError(f"step={step}: expected a non-negative integer.")
  return f"{int(step):0{_STEP_DIGITS}d}"


# ----------------------------------------------------------------------------
# Backends: files under a root, with an atomic "write a directory" operation.


class _Files(abc.ABC):
  """The few file operations the store needs; paths are '/'-joined, relative."""

  @abc.abstractmethod
  def check_writable(self) -> None:
    """Creates the root if needed; raises StoreError if it cannot be written."""

  @abc.abstractmethod
  def read(self, path: str) -> bytes | None:
    """The file's bytes, or None if it does not exist."""

  @abc.abstractmethod
  def create(self, path: str, data: bytes) -> None:
    """Writes one file atomically, unless it exists (then does nothing)."""

  @abc.abstractmethod
  def is_committed(self, directory: str) -> bool:
    """Whether `write_dir(directory, ...)` has completed."""

  @abc.abstractmethod
  def committed_dirs(self, parent: str) -> list[str]:
    """Names of the committed directories directly under `parent`."""

  @abc.abstractmethod
  def remove_stale_temporaries(self, max_age_s: float) -> list[str]:
    """Removes temporaries older than `max_age_s`; returns their URLs."""

  def write_dir(self, directory: str, files: dict[str, bytes]) -> None:
    """Writes `files` into `directory` so that readers see all or none."""
    if self.is_committed(directory):
      raise StoreError(f"{self.url(directory)} already exists: step records "
                       "are written once.")
    staged = self._stage(directory, files)
    self._commit(directory, staged)

  @abc.abstractmethod
  def _stage(self, directory: str, files: dict[str, bytes]) -> Any:
    """Writes the data where readers do not trust it yet."""

  @abc.abstractmethod
  def _commit(self, directory: str, staged: Any) -> None:
    """Makes the staged data visible to readers, in one atomic operation."""

  @abc.abstractmethod
  def url(self, path: str = "") -> str:
    """The full path or URL of `path`, for messages and for Orbax."""

  def forget_listings(self) -> None:
    """Drops any cached directory listings (before reading another's writes)."""


class _LocalFiles(_Files):
  """A directory on a local or shared file system: temp dir, then rename."""

  def __init__(self, root: str):
    self._root = os.path.abspath(os.path.expanduser(root))

  def url(self, path: str = "") -> str:
    return os.path.join(self._root, path) if path else self._root

  def check_writable(self) -> None:
    if os.path.exists(self._root) and not os.path.isdir(self._root):
      raise StoreError(f"store root {self._root!r} exists and is not a "
                       "directory.")
    try:
      os.makedirs(self._root, exist_ok=True)
      fd, probe = tempfile.mkstemp(prefix=".probe-", dir=self._root)
      os.close(fd)
      os.remove(probe)
    except OSError as e:
      raise StoreError(f"store root {self._root!r} is not writable: "
                       f"{e}") from e

  def read(self, path: str) -> bytes | None:
    try:
      with open(self.url(path), "rb") as f:
        return f.read()
    except FileNotFoundError:
      return None

  def create(self, path: str, data: bytes) -> None:
    target = self.url(path)
    parent, name = os.path.split(target)
    os.makedirs(parent, exist_ok=True)
    if os.path.exists(target):
      return
    temp = os.path.join(parent, f".tmp-{name}-{uuid.uuid4().hex}")
    with open(temp, "wb") as f:
      f.write(data)
    try:
      os.link(temp, target)  # Atomic, and fails if `target` exists.
    except FileExistsError:
      pass
    except (OSError, NotImplementedError, AttributeError):
      # No hard links here (gcsfuse, other FUSE mounts, some platforms).
      _rename_if_absent(temp, target, os.path.join(parent, f".lock-{name}"))
    finally:
      if os.path.exists(temp):
        os.remove(temp)

  def is_committed(self, directory: str) -> bool:
    return os.path.isdir(self.url(directory))

  def committed_dirs(self, parent: str) -> list[str]:
    try:
      names = os.listdir(self.url(parent))
    except FileNotFoundError:
      return []
    return [n for n in names if not n.startswith(".")]

  def remove_stale_temporaries(self, max_age_s: float) -> list[str]:
    weights = self.url(_WEIGHTS)
    agents = [entry.path for entry in _scan(weights) if entry.is_dir()]
    cutoff = time.time() - max_age_s
    removed = []
    for parent in (self._root, self.url(_STEPS), *agents):
      for entry in _scan(parent):
        if _is_temporary(entry.name) and _remove_if_older(entry, cutoff):
          removed.append(entry.path)
    return removed

  def _stage(self, directory: str, files: dict[str, bytes]) -> str:
    parent, name = os.path.split(self.url(directory))
    os.makedirs(parent, exist_ok=True)
    temp = os.path.join(parent, f".tmp-{name}-{uuid.uuid4().hex}")
    os.makedirs(temp)
    for file_name, data in files.items():
      with open(os.path.join(temp, file_name), "wb") as f:
        f.write(data)
    return temp

  def _commit(self, directory: str, staged: str) -> None:
    try:
      os.rename(staged, self.url(directory))
    except OSError as e:  # Another writer committed it first.
      raise StoreError(f"could not commit {self.url(directory)}: {e}") from e


def _rename_if_absent(temp: str, target: str, lock: str) -> None:
  """Renames `temp` to `target` unless `target` exists, holding `lock`.

  The lock file is created with O_EXCL, which FUSE file systems without hard
  links support: of two creators, the second waits for the first's file.
  """
  deadline = time.monotonic() + _LOCK_WAIT_S
  while not os.path.exists(target):
    try:
      os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:  # Another creator is writing `target`.
      if time.monotonic() > deadline:
        raise StoreError(
            f"{lock} has been held for over {_LOCK_WAIT_S:g} s while "
            f"creating {target}; if no other process is opening this store, "
            "delete the lock file (opening the store removes it once older "
            f"than {STALE_TEMPORARY_AGE_S:g} s).") from None
      time.sleep(0.05)
      continue
    try:
      if not os.path.exists(target):
        os.rename(temp, target)
    finally:
      os.remove(lock)


def _scan(directory: str) -> list[os.DirEntry]:
  """The entries of `directory`; none if it does not exist."""
  try:
    with os.scandir(directory) as entries:
      return list(entries)
  except FileNotFoundError:
    return []


def _remove_if_older(entry: os.DirEntry, cutoff: float) -> bool:
  """Removes `entry` if last modified before `cutoff`; whether it did."""
  try:
    if entry.stat(follow_symlinks=False).st_mtime >= cutoff:
      return False
    if entry.is_dir(follow_symlinks=False):
      shutil.rmtree(entry.path)
    else:
      os.remove(entry.path)
  except FileNotFoundError:  # Another opener removed it first.
    return False
  except OSError as e:
    logging.warning("store: cannot remove stale temporary %s: %s",
                    entry.path, e)
    return False
  return True


class _GcsFiles(_Files):
  """A `gs://bucket/prefix`: data objects first, a commit marker last."""

  def __init__(self, root: str):
    import tensorstore as ts  # pylint: disable=g-import-not-at-top
    self._ts = ts
    self._root = root.rstrip("/")
    bucket, _, prefix = self._root[len("gs://"):].partition("/")
    if not bucket:
      raise StoreError(f"store root {root!r}: expected gs://BUCKET[/PREFIX].")
    spec = {"driver": "gcs", "bucket": bucket,
            "path": f"{prefix}/" if prefix else ""}
    try:
      self._kv = ts.KvStore.open(spec).result()
    except ValueError as e:
      raise StoreError(f"store root {root!r} cannot be opened: {e}") from e

  def url(self, path: str = "") -> str:
    return f"{self._root}/{path}" if path else self._root

  def check_writable(self) -> None:
    probe = f".probe-{time.time_ns()}-{uuid.uuid4().hex}"
    try:
      self._kv.write(probe, b"probe").result()
      self._kv.write(probe, None).result()  # None deletes.
    except ValueError as e:
      raise StoreError(f"store root {self._root!r} is not writable: "
                       f"{e}") from e

  def read(self, path: str) -> bytes | None:
    result = self._kv.read(path).result()
    return bytes(result.value) if result.state == "value" else None

  def create(self, path: str, data: bytes) -> None:
    current = self._kv.read(path).result()
    if current.state == "missing":
      # Conditional on "still missing": a concurrent creator's write wins.
      self._kv.write(path, data, if_equal=current.stamp.generation).result()

  def is_committed(self, directory: str) -> bool:
    return self.read(f"{directory}/{_COMMITTED}") is not None

  def committed_dirs(self, parent: str) -> list[str]:
    prefix = f"{parent}/"
    # Keys under `prefix`: from "parent/" up to (excluding) "parent0".
    key_range = self._ts.KvStore.KeyRange(prefix, f"{parent}0")
    names = []
    for key in self._kv.list(key_range).result():
      rest = key.decode()[len(prefix):]
      name, _, file_name = rest.partition("/")
      if file_name == _COMMITTED:
        names.append(name)
    return names

  def remove_stale_temporaries(self, max_age_s: float) -> list[str]:
    # gs:// has no directory mtimes: probes carry their creation time in
    # their name. Uncommitted step data has no temporary name; a rewrite of
    # the step overwrites it.
    cutoff_ns = time.time_ns() - int(max_age_s * 1e9)
    key_range = self._ts.KvStore.KeyRange(".probe-", ".probe.")
    removed = []
    for key in self._kv.list(key_range).result():
      match = re.fullmatch(r"\.probe-(\d+)-[0-9a-f]+", key.decode())
      if match and int(match.group(1)) < cutoff_ns:
        self._kv.write(key.decode(), None).result()
        removed.append(self.url(key.decode()))
    return removed

  def _stage(self, directory: str, files: dict[str, bytes]) -> bytes:
    futures = [self._kv.write(f"{directory}/{name}", data)
               for name, data in files.items()]
    for future in futures:
      future.result()
    # The marker lists the files and their sizes (never an empty object:
    # some GCS emulators reject zero-byte uploads).
    return json.dumps({name: len(data) for name, data in files.items()},
                      sort_keys=True).encode()

  def _commit(self, directory: str, staged: bytes) -> None:
    self._kv.write(f"{directory}/{_COMMITTED}", staged).result()

  def forget_listings(self) -> None:
    # Orbax lists and opens gs:// paths through etils.epath's fsspec backend,
    # whose gcsfs instance caches listings for the life of the process.
    if "gcsfs" in sys.modules:
      from etils.epath import backend  # pylint: disable=g-import-not-at-top
      backend.fsspec_backend.fs(self._root).invalidate_cache()


# ----------------------------------------------------------------------------
# Step records: dict[str, np.ndarray] + JSON meta, as bytes.


def _encode_arrays(arrays: dict[str, Any]) -> bytes:
  """The .npz bytes of `arrays` (np.savez's format, without pickling)."""
  if not isinstance(arrays, dict):
    raise StoreError(f"arrays: expected a dict[str, np.ndarray], got "
                     f"{type(arrays).__name__}.")
  buffer = io.BytesIO()
  with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as zf:
    for name, value in arrays.items():
      if not isinstance(name, str) or not name:
        raise StoreError(f"arrays key {name!r}: expected a non-empty str.")
      array = np.asarray(value)
      if (array.dtype.kind not in "biufc"
          or np.dtype(array.dtype.str) != array.dtype):
        raise StoreError(
            f"arrays[{name!r}].dtype={array.dtype}: expected a numeric numpy "
            "dtype (bool, int, uint, float16/32/64, complex); convert e.g. "
            "bfloat16 to float32 first.")
      with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
        np.lib.format.write_array(f, array, allow_pickle=False)
  return buffer.getvalue()


def _decode_arrays(data: bytes) -> dict[str, np.ndarray]:
  loaded = np.load(io.BytesIO(data), allow_pickle=False)
  if not isinstance(loaded, np.lib.npyio.NpzFile):
    raise ValueError("a single .npy array, not an .npz archive")
  with loaded as npz:
    return {name: npz[name] for name in npz.files}


def _decode_json(data: bytes) -> dict[str, Any]:
  value = json.loads(data)
  if not isinstance(value, dict):
    raise ValueError(f"a JSON {type(value).__name__}, not a dict")
  return value


def _encode_json(value: dict[str, Any], field: str) -> bytes:
  if not isinstance(value, dict):
    raise StoreError(f"{field}: expected a JSON-able dict, got "
                     f"{type(value).__name__}.")
  try:
    return json.dumps(value, sort_keys=True, indent=1).encode()
  except (TypeError, ValueError) as e:
    raise StoreError(f"{field}: not JSON-able ({e}).") from e


def _read_fingerprint(files: _Files) -> dict[str, Any] | None:
  """The stored fingerprint, or None if none was written yet."""
  data = files.read(_FINGERPRINT)
  try:
    return None if data is None else _decode_json(data)
  except _CORRUPT as e:
    raise StoreError(
        f"{files.url(_FINGERPRINT)} is corrupt ({type(e).__name__}: {e}); "
        "restore it, or delete it to have the next start that writes "
        "write it again.") from e


def _check_fingerprint(files: _Files, stored: dict[str, Any],
                       given: dict[str, Any]) -> None:
  if stored != given:
    raise StoreError(
        f"the store at {files.url()} was written by an incompatible "
        "config; these fingerprint fields differ:\n"
        f"{_fingerprint_diff(stored, given)}\n"
        "Use a fresh root, or the config that wrote this one.")


def _is_count(value: Any, minimum: int = 0) -> bool:
  """Whether `value` is an int (not a bool) >= `minimum`."""
  return (isinstance(value, (int, np.integer)) and not isinstance(value, bool)
          and value >= minimum)


def _fingerprint_diff(stored: dict[str, Any], given: dict[str, Any]) -> str:
  """'key: store has X, this run has Y' for every key that differs."""
  lines = []
  for key in sorted(set(stored) | set(given)):
    old, new = stored.get(key, _ABSENT), given.get(key, _ABSENT)
    if old != new:
      lines.append(f"  {key}: store has {old!r}, this run has {new!r}")
  return "\n".join(lines)


# ----------------------------------------------------------------------------


class Store:
  """Step records and published weights under one root. See module doc."""

  def __init__(self, files: _Files, keep_weights: int | None,
               unwritten_fingerprint: dict[str, Any] | None = None):
    self._files = files
    self._keep_weights = keep_weights
    # Written (or checked again) before this Store's first data.
    self._unwritten_fingerprint = unwritten_fingerprint
    self._weight_writers: dict[str, ocp.CheckpointManager] = {}
    self._weight_readers: dict[str, ocp.CheckpointManager] = {}

  @property
  def root(self) -> str:
    return self._files.url()

  def _write_fingerprint(self) -> None:
    """Writes the fingerprint open_store found absent, unless another start
    wrote one meanwhile (then checks it)."""
    given = self._unwritten_fingerprint
    if given is None:
      return
    self._files.create(_FINGERPRINT, _encode_json(given, "fingerprint"))
    _check_fingerprint(self._files, _read_fingerprint(self._files), given)
    self._unwritten_fingerprint = None

  # -- step records --------------------------------------------------------

  def write_step(self, step: int, arrays: dict[str, np.ndarray],
                 meta: dict[str, Any]) -> None:
    """Writes step `step`'s record, atomically; a step is written once.

    Args:
      step: the training step (>= 0).
      arrays: named numeric arrays (ragged data flattened, with offsets).
      meta: a JSON-able dict (statistics, shapes, ...).

    Raises:
      StoreError: bad input, or the step was already written.
    """
    name = _step_name(step)
    files = {_ARRAYS: _encode_arrays(arrays),
             _META: _encode_json(meta, "meta")}
    self._write_fingerprint()
    self._files.write_dir(f"{_STEPS}/{name}", files)

  def has_step(self, step: int) -> bool:
    """Whether step `step` is committed (readable in full)."""
    return self._files.is_committed(f"{_STEPS}/{_step_name(step)}")

  def latest_step(self) -> int | None:
    """The highest committed step, or None if there is none."""
    steps = [int(n) for n in self._files.committed_dirs(_STEPS) if n.isdigit()]
    return max(steps, default=None)

  def read_step(
      self,
      step: int,
      *,
      timeout_s: float | None = None,
      poll_s: float = 0.5,
      status: Callable[[str], None] | None = None,
      status_every_s: float = 5.0,
  ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Waits until step `step` is committed, then returns (arrays, meta).

    Args:
      step: the step to read.
      timeout_s: give up after this many seconds (None: wait forever).
      poll_s: seconds between two checks.
      status: called with a "waiting for step N ... (12 s)" message every
        `status_every_s` seconds while waiting, e.g. to show progress.
      status_every_s: seconds between two `status` calls.

    Raises:
      StoreTimeout: the step was not committed within `timeout_s`.
      StoreError: the step's files are gone or corrupt (naming the file).
    """
    directory = f"{_STEPS}/{_step_name(step)}"
    for field, value in (("poll_s", poll_s),
                         ("status_every_s", status_every_s)):
      if not value > 0:
        raise StoreError(f"{field}={value!r}: expected seconds > 0.")
    start = time.monotonic()
    next_status = start + status_every_s
    while not self._files.is_committed(directory):
      now = time.monotonic()
      waited = now - start
      if timeout_s is not None and waited >= timeout_s:
        raise StoreTimeout(
            f"step {step} was not committed to {self.root} within "
            f"{timeout_s:g} s (latest committed step: {self.latest_step()}); "
            "is the side that writes it running, on the same root?")
      if status is not None and now >= next_status:
        status(f"waiting for step {step} in {self.root} ({waited:.0f} s)")
        next_status = now + status_every_s
      sleep_s = poll_s
      if timeout_s is not None:
        sleep_s = min(sleep_s, max(timeout_s - waited, 0.0))
      time.sleep(sleep_s)
    return (self._decode_file(step, _ARRAYS, _decode_arrays),
            self._decode_file(step, _META, _decode_json))

  def _decode_file(self, step: int, file_name: str,
                   decode: Callable[[bytes], Any]) -> Any:
    """Reads and decodes one file of committed step `step`."""
    directory = f"{_STEPS}/{_step_name(step)}"
    url = self._files.url(f"{directory}/{file_name}")
    data = self._files.read(f"{directory}/{file_name}")
    fix = (f"delete the step directory {self._files.url(directory)} (on "
           "gs://, every object under it) to have the main side write "
           f"step {step} again.")
    if data is None:
      raise StoreError(f"step {step}: {url} is gone although the step is "
                       f"committed (deleted by hand?); {fix}")
    try:
      return decode(data)
    except _CORRUPT as e:
      raise StoreError(f"step {step}: {url} is corrupt or truncated "
                       f"({type(e).__name__}: {e}); {fix}") from e

  # -- weights -------------------------------------------------------------

  def _weights_dir(self, agent: str) -> str:
    if not isinstance(agent, str) or not _AGENT_NAME.fullmatch(agent):
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
              enable_async_checkpointing=False))
      self._weight_writers[agent] = writer
    return writer

  def publish_weights(self, agent: str, step: int, params: Any) -> None:
    """Saves `params` (a pytree of arrays) as `agent`'s weights at `step`.

    Blocks until the version is committed; then, if `keep_weights` is an
    int, deletes all but the last `keep_weights` versions. Steps must
    increase from one call to the next.
    """
    _step_name(step)
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
      if not _is_count(value):
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
              read_only=True, create=False, save_interval_steps=0))
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
    _step_name(step)
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

  def close(self) -> None:
    """Waits for pending weight writes and releases Orbax's resources."""
    for manager in [*self._weight_writers.values(),
                    *self._weight_readers.values()]:
      manager.close()
    self._weight_writers.clear()
    self._weight_readers.clear()


def open_store(root: str, *, fingerprint: dict[str, Any] | None = None,
               keep_weights: int | None = None) -> Store:
  """Opens (creating if needed) the store at `root`.

  Args:
    root: a directory path, or `gs://bucket/prefix`.
    fingerprint: JSON-able config fields both sides must agree on (model
      names, B, K, D_max, ...). Compared with the stored one at open; if
      none is stored, written by this Store's first `write_step` or
      `publish_weights` (so a start that fails before writing anything
      binds no config to the root). None: no check.
    keep_weights: None keeps every version of each agent's weights until
      `Store.prune_weights` deletes it; an int N makes each publish delete
      all but the last N. A reader still loading a version when it is
      deleted gets a StoreError and loads the latest again.

  Raises:
    StoreError: `root` cannot be written, or `fingerprint` differs from the
      one stored (naming each differing key and both values).
  """
  if not isinstance(root, str) or not root:
    raise StoreError(f"root={root!r}: expected a directory path or "
                     "gs://bucket/prefix.")
  if keep_weights is not None and not _is_count(keep_weights, minimum=1):
    raise StoreError(f"keep_weights={keep_weights!r}: expected None (keep "
                     "every version) or a positive integer.")
  if root.startswith("gs://"):
    files = _GcsFiles(root)
  elif "://" in root:
    raise StoreError(f"root={root!r}: expected a directory path or "
                     "gs://bucket/prefix.")
  else:
    files = _LocalFiles(root)
  files.check_writable()
  for url in files.remove_stale_temporaries(STALE_TEMPORARY_AGE_S):
    logging.info("store: removed %s, a crashed writer's temporary", url)
  given = None
  if fingerprint is not None:
    given = json.loads(_encode_json(fingerprint, "fingerprint"))
    stored = _read_fingerprint(files)
    if stored is not None:
      _check_fingerprint(files, stored, given)
      given = None  # Already written.
  return Store(files, keep_weights, unwritten_fingerprint=given)
