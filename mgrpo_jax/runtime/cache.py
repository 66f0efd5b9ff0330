"""The keyed on-disk cache: one folder per key under one root, written whole.

Root: `cache_dir` if given, else `$MGRPO_JAX_CACHE`, else `~/.cache/mgrpo_jax`.
Users keep one kind of entry per sub-folder (converted checkpoints by model
name, tiny tokenizers and SFT warm starts by a hash of what made them, the
synthetic world's tfds files, XLA compilations).

`write_entry` builds an entry in a temporary folder beside its target and
renames it into place, so a reader never sees half an entry; when two
processes build the same entry at once, the first rename wins and the other
uses its copy (never moving it from under a reader). Only a caller that saw
the complete entry before its work began, and chose to rebuild it, replaces
it (`replace=True`): what was complete when the write begins may be another
process's entry, finished while this one computed, and already being read. Imports only the
standard library (data/world_builder.py uses it without loading JAX).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
from typing import Callable

CACHE_ENV = "MGRPO_JAX_CACHE"  # Environment variable naming the cache root.
DEFAULT_ROOT = "~/.cache/mgrpo_jax"


def cache_root(cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
  """`cache_dir`, else $MGRPO_JAX_CACHE, else ~/.cache/mgrpo_jax."""
  root = cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_ROOT
  return pathlib.Path(root).expanduser()


def write_entry(target: pathlib.Path, build: Callable[[pathlib.Path], None],
                *, is_complete: Callable[[pathlib.Path], bool],
                replace: bool = False) -> pathlib.Path:
  """Builds the entry `target` with `build(folder)` and renames it in place.

  A complete entry is replaced only with `replace=True`: the caller found
  it complete before computing what `build` writes and chose to rebuild it
  (e.g. config.sft.cache=False). Otherwise a complete entry is another
  process's, finished while this one computed (two roles training the same
  warm start at once): it is kept and this build's copy dropped, since that
  process may be reading it already and moving it aside would pull it from
  under the reader. The folder is world-readable like the rest of the cache
  (mkdtemp would leave it private)."""
  target = pathlib.Path(target)
  target.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-",
                                      dir=target.parent))
  tmp.chmod(0o755)
  try:
    build(tmp)
    if target.exists() and not replace and is_complete(target):
      return target  # Another process's copy won the race: use it.
    if target.exists():  # Move the old entry aside, then swap the new one in.
      stale = pathlib.Path(tempfile.mkdtemp(prefix=f".stale-{target.name}-",
                                            dir=target.parent))
      os.rename(target, stale / target.name)
      shutil.rmtree(stale, ignore_errors=True)
    try:
      os.rename(tmp, target)
    except OSError:  # Another process won the race: use its copy.
      if not is_complete(target):
        raise
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return target
