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
import itertools
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

  `stacked`: how many leading axes index the pieces (True: 1, the layer
  axis, pieces[l] is layer l's tensor; 2: layers and experts, pieces in
  row-major order, pieces[l * E + e]); 0 / False: exactly one piece.
  """

  def __init__(self, shape: Sequence[int], pieces: Sequence[Piece], *,
               stacked: bool | int):
    self.shape = tuple(int(s) for s in shape)
    self.pieces = tuple(pieces)
    self.depth = int(stacked)
    self.stacked = self.depth > 0
    if len(self.pieces) != int(np.prod(self.shape[:self.depth])):
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
    if not self.depth:
      return self._read(self.pieces[0], slices)
    outer = [range(s.start, s.stop) for s in slices[:self.depth]]
    strides = [int(np.prod(self.shape[a + 1:self.depth]))
               for a in range(self.depth)]
    parts = [self._read(self.pieces[sum(i * st for i, st in zip(at, strides))],
                        slices[self.depth:])
             for at in itertools.product(*outer)]
    shape = tuple(s.stop - s.start for s in slices)
    if parts:
      return np.stack(parts).reshape(shape)
    dtype = self._read(self.pieces[0],
                       (slice(0, 0),) * (self.ndim - self.depth)).dtype
    return np.empty(shape, dtype)

  def __array__(self, dtype=None, copy=None):
    value = self[()]
    return value if dtype is None else value.astype(dtype)
