"""Packing trajectories into a fixed-shape batch: [N, T] with N a multiple of
the micro-batch and T a bucket (min_len x 1, 1.5, 2, 3, 4, 6, ..., max_len),
so a run compiles at most one train step per bucket whatever its
trajectories were; `closed_lengths` lists them all (what a run with
runtime.shapes="closed" compiles at start-up).
Used by both learners (RL, train/learner.py) and SFT (train/sft.py)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from mgrpo_jax.runtime.buckets import bucket


@dataclasses.dataclass
class Batch:
  """A packed batch (numpy, host): position t predicts target t."""
  inputs_NxT: np.ndarray  # int32: ids [0, T).
  targets_NxT: np.ndarray  # int32: ids [1, T].
  mask_NxT: np.ndarray  # float32: 1 where the agent generated the target.
  adv_N: np.ndarray  # float32
  behaviour_NxT: np.ndarray | None  # float32: the sampler's log-prob of each
  # target; None: sampled by the learner's current weights (no correction).
  version_N: np.ndarray  # int32: weight version that sampled the row.
  num_sequences: int  # Real (unpadded, valid) sequences.
  num_rows: int  # Trajectories given to `pack` (valid or not): B of Dr. GRPO.
  # True: this process's columns of a batch that several processes packed
  # (train/shards.py): the learner joins them; counts (`num_rows` aside,
  # which is the whole batch's) are this process's.
  local: bool = False


def closed_lengths(min_len: int, max_len: int) -> list[int]:
  """Every padded length T `pack` can give: the bucket ladder from min_len
  (x 1, 1.5, 2, 3, ...) up to max_len. (A power-of-two ladder, fewer
  programs, padded the sub-agent's batches of configs/default.py enough to
  double its update: 8.9 s against 4.2 s, bench.step.)"""
  out = []
  while not out or out[-1] < max_len:
    out.append(bucket(out[-1] + 1 if out else 1, min_len, max_len))
  return out


def pack(tokens: Sequence[np.ndarray], loss_masks: Sequence[np.ndarray],
         advantages: Sequence[float], *, micro_batch: int, min_len: int,
         max_len: int, valid: Sequence[bool] | None = None,
         logprobs: Sequence[np.ndarray] | None = None,
         versions: Sequence[int] | None = None,
         longest: int | None = None) -> Batch:
  """Packs trajectories into a `Batch` (see the module docstring).

  An invalid trajectory (`valid` False, e.g. an empty alignment slot) stays
  in the batch with an all-zero mask, so N does not depend on the data.
  `logprobs[i]` is aligned with `tokens[i]` (the sampler's log-prob of each
  generated id; `Trajectory.logprobs`); `versions[i]` the weight version
  that sampled it. Without log-probs the data counts as sampled by the
  learner's current weights; version -1 marks a version unknown.
  `longest` (targets of the longest trajectory) sets T's bucket when
  several packings must share it (default: these trajectories').
  """
  n = len(tokens)
  if not (len(loss_masks) == len(advantages) == n) or n == 0:
    raise ValueError(f"pack: {n} token arrays, {len(loss_masks)} masks, "
                     f"{len(advantages)} advantages; expected the same "
                     "number, at least one.")
  if logprobs is not None and len(logprobs) != n:
    raise ValueError(f"pack: {len(logprobs)} log-prob arrays for {n} "
                     "trajectories.")
  valid = [True] * n if valid is None else list(valid)
  if longest is None:
    longest = max(len(t) for t in tokens) - 1
  t = bucket(max(longest, 1), min_len, max_len)
  rows = -(-n // micro_batch) * micro_batch
  inputs = np.zeros((rows, t), np.int32)
  targets = np.zeros((rows, t), np.int32)
  mask = np.zeros((rows, t), np.float32)
  adv = np.zeros((rows,), np.float32)
  behaviour = None if logprobs is None else np.zeros((rows, t), np.float32)
  version = np.full((rows,), -1, np.int32)
  if versions is not None:
    version[:n] = versions
  for i, (ids, m) in enumerate(zip(tokens, loss_masks)):
    ids, m = np.asarray(ids, np.int32), np.asarray(m, bool)
    lp = None if logprobs is None else np.asarray(logprobs[i], np.float32)
    if ids.shape != m.shape or (lp is not None and lp.shape != ids.shape):
      raise ValueError(f"pack: trajectory {i} has {ids.shape[0]} ids but a "
                       f"mask of {m.shape[0]}" + (
                           "" if lp is None else f" and {lp.shape[0]} "
                           "log-probs") + "; expected one per id.")
    length = min(len(ids) - 1, t)
    if length <= 0:
      continue
    inputs[i, :length] = ids[:length]
    targets[i, :length] = ids[1:length + 1]
    mask[i, :length] = m[1:length + 1] * bool(valid[i])
    if behaviour is not None:
      behaviour[i, :length] = lp[1:length + 1]
    adv[i] = advantages[i]
  return Batch(inputs, targets, mask, adv, behaviour, version,
               int(sum(map(bool, valid))), n)


def side_by_side(columns: Sequence[Batch], micro_batch: int, num_rows: int,
                 *, local: bool = False) -> Batch:
  """Batches packed with the same micro-batch m (`micro_batch`) and T as
  columns of one:
  micro-batch u holds each column's u-th m rows, in column order ([U, m,
  T] each -> [U, m * len(columns), T], flattened back to rows).
  `num_rows` is the joined batch's trajectory count."""
  if len(columns) == 1 and not local:
    return dataclasses.replace(columns[0], num_rows=num_rows)
  u = {len(c.adv_N) for c in columns}
  if len(u) != 1:
    raise ValueError(f"side_by_side: columns of {sorted(u)} rows; expected "
                     "one size.")

  def join(name):
    parts = [getattr(c, name) for c in columns]
    if parts[0] is None:
      return None
    return np.concatenate([p.reshape(len(columns[0].adv_N) // m, m,
                                     *p.shape[1:]) for p in parts],
                          axis=1).reshape(-1, *parts[0].shape[1:])

  m = micro_batch
  return Batch(join("inputs_NxT"), join("targets_NxT"), join("mask_NxT"),
               join("adv_N"), join("behaviour_NxT"), join("version_N"),
               sum(c.num_sequences for c in columns), num_rows, local)
