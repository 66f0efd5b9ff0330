"""Parameters read from safetensors files only where a shard needs them.

A 30B-parameter agent on a mesh over several hosts is ~60 GB of weights;
each host holds only its devices' shards. A `ParameterView` stands for one
of our (stacked, [in, out]) parameters without reading it: indexing it
(`view[index]`, the index `jax.make_array_from_callback` passes for one
device) reads just that region from the Hugging Face tensors behind it
(safetensors' `get_slice` reads the byte ranges it needs, through a
memory map), one layer tensor at a time, transposing HF's [out, in]
layout. `np.asarray(view)` reads it whole. `elements_read` counts what was
read, so tests can check that a shard's load reads its shard.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Sequence

import ml_dtypes  # noqa: F401  (registers numpy's "bfloat16" dtype name)
import numpy as np
import safetensors


@dataclasses.dataclass(frozen=True)
class Piece:
  """One HF tensor behind a parameter (one layer of a stacked one)."""
  file: pathlib.Path
  tensor: str
  transpose: bool  # HF stores [out, in]; we store [in, out]


class ParameterView:
  """One parameter of shape `shape`, read from `pieces` only where indexed.

  `stacked`: the parameter's leading axis is the layer axis, and pieces[l]
  is layer l's tensor; else there is exactly one piece.
  """

  def __init__(self, shape: Sequence[int], pieces: Sequence[Piece], *,
               stacked: bool):
    self.shape = tuple(int(s) for s in shape)
    self.pieces = tuple(pieces)
    self.stacked = stacked
    if (len(self.pieces) != (self.shape[0] if stacked else 1)):
      raise ValueError(f"{len(self.pieces)} piece(s) for a parameter of shape "
                       f"{self.shape} (stacked={stacked}).")
    self.elements_read = 0

  @property
  def ndim(self) -> int:
    return len(self.shape)

  def _slices(self, index) -> tuple[slice, ...]:
    index = index if isinstance(index, tuple) else (index,)
    if len(index) > self.ndim:
      raise IndexError(f"index {index} has more axes than shape {self.shape}")
    out = []
    for axis, part in enumerate(index + (slice(None),) * (self.ndim
                                                          - len(index))):
      if not isinstance(part, slice) or part.step not in (None, 1):
        raise IndexError(f"ParameterView takes contiguous slices; got {part!r} "
                         f"on axis {axis} of shape {self.shape}.")
      start, stop, _ = part.indices(self.shape[axis])
      out.append(slice(start, max(start, stop)))
    return tuple(out)

  def _read(self, piece: Piece, index: tuple[slice, ...]) -> np.ndarray:
    file_index = tuple(reversed(index)) if piece.transpose else index
    with safetensors.safe_open(str(piece.file), framework="np") as f:
      value = f.get_slice(piece.tensor)[file_index] if file_index else (
          f.get_tensor(piece.tensor))
    value = np.asarray(value)
    self.elements_read += value.size
    return np.ascontiguousarray(value.T) if piece.transpose else value

  def __getitem__(self, index) -> np.ndarray:
    slices = self._slices(index)
    if not self.stacked:
      return self._read(self.pieces[0], slices)
    layers = [self._read(self.pieces[l], slices[1:])
              for l in range(slices[0].start, slices[0].stop)]
    if layers:
      return np.stack(layers)
    dtype = self._read(self.pieces[0], (slice(0, 0),) * (self.ndim - 1)).dtype
    return np.empty(tuple(s.stop - s.start for s in slices), dtype)

  def __array__(self, dtype=None, copy=None):
    value = self[()]
    return value if dtype is None else value.astype(dtype)
