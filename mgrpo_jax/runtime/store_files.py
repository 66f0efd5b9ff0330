"""The store's file backends: a local directory and gs://, each with an
atomic "write a directory" operation (runtime/store.py's module docstring
gives the layout and the guarantees)."""

from __future__ import annotations

import abc
import json
import os
import pathlib
import re
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any

from absl import logging

_COMMITTED = "COMMITTED"
# Temporaries older than this when a store opens were left by a crashed
# writer (a live one finishes within seconds) and are removed.
STALE_TEMPORARY_AGE_S = 3600.0
_STEPS = "steps"  # As in store.py: the folders a store cleans up.
_WEIGHTS = "weights"
_TEMPORARY_PREFIXES = (".tmp-", ".probe-", ".lock-")
_ORBAX_TEMPORARY = ".orbax-checkpoint-tmp"
# How long `create` waits for another creator's lock before giving up.
LOCK_WAIT_S = 30.0


class StoreError(Exception):
  """A store that cannot be used as asked (unwritable, incompatible, ...)."""


class StoreTimeout(StoreError):
  """`Store.read_step` waited `timeout_s` and the step never appeared."""


def _is_temporary(name: str) -> bool:
  """Whether a directory entry is a store's (or Orbax's) temporary."""
  return name.startswith(_TEMPORARY_PREFIXES) or _ORBAX_TEMPORARY in name


# ----------------------------------------------------------------------------
# Backends: files under a root, with an atomic "write a directory" operation.


class Files(abc.ABC):
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

  def write_dir(self, directory: str,
                files: dict[str, bytes | pathlib.Path]) -> None:
    """Writes `files` into `directory` so that readers see all or none; a
    value that is a local file's path is copied from it (one file at a
    time, never all of them in memory)."""
    if self.is_committed(directory):
      raise StoreError(f"{self.url(directory)} already exists: step records "
                       "are written once.")
    staged = self._stage(directory, files)
    self._commit(directory, staged)

  @abc.abstractmethod
  def _stage(self, directory: str, files: dict[str, bytes | pathlib.Path]
             ) -> Any:
    """Writes the data where readers do not trust it yet."""

  @abc.abstractmethod
  def _commit(self, directory: str, staged: Any) -> None:
    """Makes the staged data visible to readers, in one atomic operation."""

  @abc.abstractmethod
  def url(self, path: str = "") -> str:
    """The full path or URL of `path`, for messages and for Orbax."""

  def forget_listings(self) -> None:
    """Drops any cached directory listings (before reading another's writes)."""


class LocalFiles(Files):
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

  def _stage(self, directory: str, files: dict[str, bytes | pathlib.Path]
             ) -> str:
    parent, name = os.path.split(self.url(directory))
    os.makedirs(parent, exist_ok=True)
    temp = os.path.join(parent, f".tmp-{name}-{uuid.uuid4().hex}")
    os.makedirs(temp)
    for file_name, data in files.items():
      if isinstance(data, pathlib.Path):
        shutil.copyfile(data, os.path.join(temp, file_name))
        continue
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
  deadline = time.monotonic() + LOCK_WAIT_S
  while not os.path.exists(target):
    try:
      os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:  # Another creator is writing `target`.
      if time.monotonic() > deadline:
        raise StoreError(
            f"{lock} has been held for over {LOCK_WAIT_S:g} s while "
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


class GcsFiles(Files):
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

  def _stage(self, directory: str, files: dict[str, bytes | pathlib.Path]
             ) -> bytes:
    futures, sizes = [], {}
    for name, data in files.items():
      if isinstance(data, pathlib.Path):  # One file's bytes at a time.
        data = data.read_bytes()
        self._kv.write(f"{directory}/{name}", data).result()
      else:
        futures.append(self._kv.write(f"{directory}/{name}", data))
      sizes[name] = len(data)
    for future in futures:
      future.result()
    # The marker lists the files and their sizes (never an empty object:
    # some GCS emulators reject zero-byte uploads).
    return json.dumps(sizes, sort_keys=True).encode()

  def _commit(self, directory: str, staged: bytes) -> None:
    self._kv.write(f"{directory}/{_COMMITTED}", staged).result()

  def forget_listings(self) -> None:
    # Orbax lists and opens gs:// paths through etils.epath's fsspec backend,
    # whose gcsfs instance caches listings for the life of the process.
    if "gcsfs" in sys.modules:
      from etils.epath import backend  # pylint: disable=g-import-not-at-top
      backend.fsspec_backend.fs(self._root).invalidate_cache()
