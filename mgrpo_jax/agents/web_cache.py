"""The web backend's response cache: one JSON file per request, written whole.

An entry is keyed by `request_key(method, endpoint, params)`: the sha256 of
the request's method, endpoint (the URL without a query string) and
parameters as canonical JSON. Credentials are never part of a request's
parameters (the API key travels in a header), so the key and the file are
the same for every user and never hold a secret. An entry lives in
`<root>/<key[:2]>/<key>.json`:

  {"request": {"method", "endpoint", "params"},     what was asked
   "content_type": "text/html" | null,              an answer
   "text": "...", "truncated": false, "bytes": N}
or
  {"request": {...}, "failure": KIND, "detail": "timed out after 3 tries",
   "transient": true}                               no answer (agents/web.py)

`put` writes a temporary file beside the entry and renames it into place, so
a reader (or a run killed mid-write) never sees half an entry and nothing
already written is lost. Imports the standard library and absl only.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import tempfile
from typing import Any, Mapping

from absl import logging


def request_key(method: str, endpoint: str,
                params: Mapping[str, Any]) -> str:
  """sha256 hex digest of (method, endpoint, params); params' order does
  not matter, and credentials must not be in them."""
  canonical = json.dumps([method.upper(), endpoint, dict(params)],
                         sort_keys=True, ensure_ascii=False,
                         separators=(",", ":"))
  return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ResponseCache:
  """Entries (JSON objects) by request key under one root folder."""

  def __init__(self, root: str | os.PathLike):
    self.root = pathlib.Path(root).expanduser()

  def path(self, key: str) -> pathlib.Path:
    return self.root / key[:2] / f"{key}.json"

  def get(self, key: str) -> dict[str, Any] | None:
    """The entry, or None when there is none (an unreadable entry is logged
    and read as none: the request is made again and the entry rewritten)."""
    path = self.path(key)
    try:
      with open(path, encoding="utf-8") as f:
        entry = json.load(f)
    except FileNotFoundError:
      return None
    except (OSError, ValueError) as e:
      logging.warning("web cache: ignoring unreadable entry %s (%s)", path, e)
      return None
    if not isinstance(entry, dict):
      logging.warning("web cache: ignoring entry %s (not a JSON object)", path)
      return None
    return entry

  def put(self, key: str, entry: Mapping[str, Any]) -> None:
    """Writes the entry whole: a temporary file, then a rename over the
    entry's path."""
    path = self.path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{key[:8]}-", suffix=".json",
                               dir=path.parent)
    try:
      with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(entry, f, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())
      os.chmod(tmp, 0o644)  # mkstemp leaves it private; the cache is shared.
      os.replace(tmp, path)
    except BaseException:
      pathlib.Path(tmp).unlink(missing_ok=True)
      raise

  def __len__(self) -> int:
    return sum(1 for _ in self.root.glob("??/*.json"))
