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
  <root>/parts/<step>/<part>/      a role over several processes: each
      arrays.npz                     process's share of the step's arrays,
                                     written before process 0 commits the
                                     step (its meta.json says how many)
  <root>/weights/<agent>/<step>/   one Orbax checkpoint per published version
  <root>/warm_starts/<key>/        a role over several processes: the warm
                                   start process 0 trained, for the others

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
(that agent's learner); any number of readers. A store written by an
incompatible config (the trainer's fingerprint: model, world, B, K, D_max,
seed) is refused when it opens, naming the differing fields.

gs:// needs `gcsfs` (Orbax reaches GCS directories through etils.epath and
fsspec); step records use tensorstore's `gcs` key-value store. Both use the
machine's Google credentials. gcsfs caches directory listings for the life of
a process: the store forgets them before every read, so it sees what another
process wrote or deleted.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any, Callable

import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from mgrpo_jax.runtime.store_codec import (CORRUPT, FINGERPRINT,
                                           check_fingerprint, decode_arrays,
                                           decode_json, encode_arrays,
                                           encode_json, is_count,
                                           read_fingerprint)
from mgrpo_jax.runtime.store_files import (STALE_TEMPORARY_AGE_S, Files,
                                           GcsFiles, LocalFiles, StoreError,
                                           StoreTimeout)
from mgrpo_jax.runtime.store_weights import (AGENT_NAME, PublishedWeights,
                                             step_name)

_STEPS = "steps"
_PARTS = "parts"
_WARM_STARTS = "warm_starts"
_MANIFEST = "MANIFEST.json"  # A shared folder's file names.
PARTS_KEY = "parts"  # A step's meta: how many per-process parts it has.
_ARRAYS = "arrays.npz"
_META = "meta.json"


def _checked_key(key: str) -> str:
  if not isinstance(key, str) or not AGENT_NAME.fullmatch(key):
    raise StoreError(f"key={key!r}: expected a name of letters, digits, "
                     "'_', '.' and '-'.")
  return key


def _part_name(part: int) -> str:
  if (isinstance(part, bool) or not isinstance(part, (int, np.integer))
      or part < 0):
    raise StoreError(f"part={part!r}: expected a non-negative integer (the "
                     "writing process's index).")
  return f"{int(part):05d}"


class Store(PublishedWeights):
  """Step records and published weights under one root. See module doc."""

  def __init__(self, files: Files, keep_weights: int | None,
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
    self._files.create(FINGERPRINT, encode_json(given, "fingerprint"))
    check_fingerprint(self._files, read_fingerprint(self._files), given)
    self._unwritten_fingerprint = None

  # -- step records --------------------------------------------------------

  def write_step(self, step: int, arrays: dict[str, np.ndarray],
                 meta: dict[str, Any], *, parts: int = 0) -> None:
    """Writes step `step`'s record, atomically; a step is written once.

    Args:
      step: the training step (>= 0).
      arrays: named numeric arrays (ragged data flattened, with offsets).
      meta: a JSON-able dict (statistics, shapes, ...).
      parts: > 0 when the step's data was written by that many processes
        as parts 0..parts-1 (`write_part`), all before this call: the
        record commits them together (`read_parts` returns them).

    Raises:
      StoreError: bad input, the step was already written, or a part is
        missing.
    """
    name = step_name(step)
    if PARTS_KEY in meta:
      raise StoreError(f"meta key {PARTS_KEY!r} is the store's own (how "
                       "many parts a step has); pass parts= instead.")
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 0:
      raise StoreError(f"parts={parts!r}: expected an integer >= 0.")
    if parts:
      missing = [p for p in range(parts) if not self._files.is_committed(
          f"{_PARTS}/{name}/{_part_name(p)}")]
      if missing:
        raise StoreError(
            f"step {step}: parts {missing} of {parts} are not written in "
            f"{self._files.url(f'{_PARTS}/{name}')}; every process writes "
            "its part (write_part) before the step is committed.")
      meta = {**meta, PARTS_KEY: parts}
    files = {_ARRAYS: encode_arrays(arrays),
             _META: encode_json(meta, "meta")}
    self._write_fingerprint()
    self._files.write_dir(f"{_STEPS}/{name}", files)

  def write_part(self, step: int, part: int,
                 arrays: dict[str, np.ndarray]) -> None:
    """Writes process `part`'s share of step `step`'s arrays, atomically
    (a role over several processes: each writes its own, then process 0
    commits the step with `write_step(..., parts=n)`). A part is written
    once; readers see it only through its committed step."""
    name = step_name(step)
    path = f"{_PARTS}/{name}/{_part_name(part)}"
    self._write_fingerprint()
    if self._files.is_committed(path):
      raise StoreError(f"step {step}: part {part} is already written in "
                       f"{self._files.url(path)}.")
    self._files.write_dir(path, {_ARRAYS: encode_arrays(arrays)})

  def has_part(self, step: int, part: int) -> bool:
    """Whether process `part`'s share of step `step` is written."""
    return self._files.is_committed(
        f"{_PARTS}/{step_name(step)}/{_part_name(part)}")

  def read_parts(self, step: int, meta: dict[str, Any]
                 ) -> list[dict[str, np.ndarray]]:
    """The parts of committed step `step` (`meta` is its meta, from
    `read_step`), in part order; [] for a step written whole."""
    name = step_name(step)
    return [self._decode_file(step, f"{_PARTS}/{name}/{_part_name(p)}/"
                              f"{_ARRAYS}", decode_arrays, top=True)
            for p in range(int(meta.get(PARTS_KEY, 0)))]

  def has_step(self, step: int) -> bool:
    """Whether step `step` is committed (readable in full)."""
    return self._files.is_committed(f"{_STEPS}/{step_name(step)}")

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
    directory = f"{_STEPS}/{step_name(step)}"
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
    return (self._decode_file(step, _ARRAYS, decode_arrays),
            self._decode_file(step, _META, decode_json))

  def _decode_file(self, step: int, file_name: str,
                   decode: Callable[[bytes], Any], *, top: bool = False
                   ) -> Any:
    """Reads and decodes one file of committed step `step` (`file_name`
    under the root with `top`, else in the step's directory)."""
    directory = f"{_STEPS}/{step_name(step)}"
    path = file_name if top else f"{directory}/{file_name}"
    url = self._files.url(path)
    data = self._files.read(path)
    extra = (f" and {self._files.url(f'{_PARTS}/{step_name(step)}')}"
             if top else "")
    fix = (f"delete the step directory {self._files.url(directory)}{extra} "
           "(on gs://, every object under it) to have the main side write "
           f"step {step} again.")
    if data is None:
      raise StoreError(f"step {step}: {url} is gone although the step is "
                       f"committed (deleted by hand?); {fix}")
    try:
      return decode(data)
    except CORRUPT as e:
      raise StoreError(f"step {step}: {url} is corrupt or truncated "
                       f"({type(e).__name__}: {e}); {fix}") from e

  # -- shared folders ------------------------------------------------------

  def share_warm_start(self, key: str, folder: pathlib.Path) -> None:
    """Shares the files of `folder` (a warm start process 0 trained) as
    warm start `key`, for the role's processes on other hosts; once per
    key (a later call with the key keeps the first)."""
    path = f"{_WARM_STARTS}/{_checked_key(key)}"
    if self._files.is_committed(path):
      return
    files: dict[str, bytes | pathlib.Path] = {
        p.name: p for p in sorted(folder.iterdir()) if p.is_file()}
    files[_MANIFEST] = encode_json({"files": sorted(files)}, "manifest")
    self._write_fingerprint()
    self._files.write_dir(path, files)

  def copy_warm_start(self, key: str, folder: pathlib.Path) -> bool:
    """Writes warm start `key`'s files into `folder`; False when the store
    has no such warm start."""
    path = f"{_WARM_STARTS}/{_checked_key(key)}"
    if not self._files.is_committed(path):
      return False
    names = decode_json(self._files.read(f"{path}/{_MANIFEST}"))["files"]
    for name in names:
      data = self._files.read(f"{path}/{name}")
      if data is None:
        raise StoreError(f"{self._files.url(f'{path}/{name}')} is gone "
                         "although its warm start is committed; delete "
                         f"{self._files.url(path)} and start again.")
      (folder / name).write_bytes(data)
    return True

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
  if keep_weights is not None and not is_count(keep_weights, minimum=1):
    raise StoreError(f"keep_weights={keep_weights!r}: expected None (keep "
                     "every version) or a positive integer.")
  if root.startswith("gs://"):
    files = GcsFiles(root)
  elif "://" in root:
    raise StoreError(f"root={root!r}: expected a directory path or "
                     "gs://bucket/prefix.")
  else:
    files = LocalFiles(root)
  files.check_writable()
  for url in files.remove_stale_temporaries(STALE_TEMPORARY_AGE_S):
    logging.info("store: removed %s, a crashed writer's temporary", url)
  given = None
  if fingerprint is not None:
    given = json.loads(encode_json(fingerprint, "fingerprint"))
    stored = read_fingerprint(files)
    if stored is not None:
      check_fingerprint(files, stored, given)
      given = None  # Already written.
  return Store(files, keep_weights, unwritten_fingerprint=given)
