"""Step records as bytes: dict[str, np.ndarray] as .npz (no pickle), JSON
meta, and the fingerprint both sides of a run must agree on."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import numpy as np

from mgrpo_jax.runtime.store_files import Files, StoreError

FINGERPRINT = "fingerprint.json"
_ABSENT = "<absent>"
# What decoding a damaged .npz or JSON file raises.
CORRUPT = (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError)


# ----------------------------------------------------------------------------
# Step records: dict[str, np.ndarray] + JSON meta, as bytes.


def encode_arrays(arrays: dict[str, Any]) -> bytes:
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


def decode_arrays(data: bytes) -> dict[str, np.ndarray]:
  loaded = np.load(io.BytesIO(data), allow_pickle=False)
  if not isinstance(loaded, np.lib.npyio.NpzFile):
    raise ValueError("a single .npy array, not an .npz archive")
  with loaded as npz:
    return {name: npz[name] for name in npz.files}


def decode_json(data: bytes) -> dict[str, Any]:
  value = json.loads(data)
  if not isinstance(value, dict):
    raise ValueError(f"a JSON {type(value).__name__}, not a dict")
  return value


def encode_json(value: dict[str, Any], field: str) -> bytes:
  if not isinstance(value, dict):
    raise StoreError(f"{field}: expected a JSON-able dict, got "
                     f"{type(value).__name__}.")
  try:
    return json.dumps(value, sort_keys=True, indent=1).encode()
  except (TypeError, ValueError) as e:
    raise StoreError(f"{field}: not JSON-able ({e}).") from e


def read_fingerprint(files: Files) -> dict[str, Any] | None:
  """The stored fingerprint, or None if none was written yet."""
  data = files.read(FINGERPRINT)
  try:
    return None if data is None else decode_json(data)
  except CORRUPT as e:
    raise StoreError(
        f"{files.url(FINGERPRINT)} is corrupt ({type(e).__name__}: {e}); "
        "restore it, or delete it to have the next start that writes "
        "write it again.") from e


def check_fingerprint(files: Files, stored: dict[str, Any],
                       given: dict[str, Any]) -> None:
  if stored != given:
    raise StoreError(
        f"the store at {files.url()} was written by an incompatible "
        "config; these fingerprint fields differ:\n"
        f"{fingerprint_diff(stored, given)}\n"
        "Use a fresh root, or the config that wrote this one.")


def is_count(value: Any, minimum: int = 0) -> bool:
  """Whether `value` is an int (not a bool) >= `minimum`."""
  return (isinstance(value, (int, np.integer)) and not isinstance(value, bool)
          and value >= minimum)


def fingerprint_diff(stored: dict[str, Any], given: dict[str, Any]) -> str:
  """'key: store has X, this run has Y' for every key that differs."""
  lines = []
  for key in sorted(set(stored) | set(given)):
    old, new = stored.get(key, _ABSENT), given.get(key, _ABSENT)
    if old != new:
      lines.append(f"  {key}: store has {old!r}, this run has {new!r}")
  return "\n".join(lines)


# ----------------------------------------------------------------------------
