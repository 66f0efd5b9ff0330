"""Files of a run directory, local or `gs://` (etils.epath): what the
trainer writes beside its Orbax checkpoints (metrics lines, per-question
outcomes, the model card), on any file system Orbax writes to, so a role
whose hosts share only a bucket keeps its whole run there.

A local file is appended in place (and synced). An object store cannot
append: a `gs://` file is rewritten whole with every append, which suits
the small files a run keeps (a thousand steps of metrics are a few MB);
only process 0 of a role writes them (runtime/processes.py), so no two
writers race.
"""

from __future__ import annotations

import os
from typing import Any

from etils import epath


def is_remote(path: Any) -> bool:
  """Whether `path` is a URL (gs://...) rather than a local path."""
  return "://" in str(path)


def path_of(path: Any) -> epath.Path:
  """`path` as an epath.Path (local paths made absolute)."""
  return epath.Path(str(path) if is_remote(path)
                    else os.path.abspath(os.fspath(path)))


def append_text(path: Any, text: str) -> None:
  """Appends `text` to the file `path` (created with its folders)."""
  target = path_of(path)
  target.parent.mkdir(parents=True, exist_ok=True)
  if not is_remote(path):
    with open(os.fspath(target), "a", encoding="utf-8") as stream:
      stream.write(text)
      stream.flush()
      os.fsync(stream.fileno())
    return
  old = target.read_text() if target.exists() else ""
  target.write_text(old + text)


def read_text(path: Any) -> str | None:
  """The text of the file `path`, or None when it does not exist."""
  target = path_of(path)
  return target.read_text() if target.exists() else None
