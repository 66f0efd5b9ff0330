"""From scored rollouts to each agent's training batch.

Main agent: one trajectory per rollout, [B*K]; advantages over the K
rollouts of each question (core.advantages).

Sub-agent: the main side flattens every sub trajectory of the step into a
`SubRecord` (what goes through the shared store: ids, masks, the sampler's
log-probs and weight version, rewards and the (b, k) links). The sub side aligns the variable number of calls per rollout
to [B, K, D_max] slots (core.alignment), takes advantages over the valid
slots of each question (or of each rollout with group_by="rollout", of
each delegated sub-task of a question with group_by="subtask", or of each
delegation's attempts with group_by="branch"), and
packs the [B*K*D_max] slot trajectories: one compiled step whatever the
calls were. Everything here is host-side numpy around the jitted core.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import numpy as np

from mgrpo_jax.agents.rewards import Scores
from mgrpo_jax.agents.trajectory import Rollout
from mgrpo_jax.agents.diagnostics import normalised
from mgrpo_jax.data.task import Task
from mgrpo_jax.core.advantages import group_relative_advantages
from mgrpo_jax.core.alignment import align_sub_trajectories
from mgrpo_jax.train.packing import Batch, pack, side_by_side
from mgrpo_jax.train.shards import Shards


@dataclasses.dataclass
class PackSettings:
  micro_batch: int
  min_len: int
  max_len: int


def signal(adv_N: np.ndarray, groups_N: np.ndarray, num_groups: int,
           valid_N: np.ndarray | None = None) -> dict[str, float]:
  """How much of a batch carries a learning signal: `informative_groups`,
  the share of the `num_groups` groups with at least one valid row whose
  advantage is not 0 (a group whose rewards are all equal, or that has no
  valid row, teaches nothing), and `informative_rows`, the share of valid
  rows whose advantage is not 0."""
  adv_N, groups_N = np.asarray(adv_N), np.asarray(groups_N)
  valid_N = (np.ones(len(adv_N), bool) if valid_N is None
             else np.asarray(valid_N, bool))
  moving = valid_N & (adv_N != 0)
  groups = np.zeros(max(num_groups, 1), bool)
  groups[groups_N[moving]] = True
  return {"informative_groups": float(groups[:num_groups].mean())
                                if num_groups else 0.0,
          "informative_rows": float(moving.sum() / max(valid_N.sum(), 1))}


def longest_main(rollouts: Sequence[Sequence[Rollout]]) -> int:
  """Targets of the longest main trajectory of `rollouts` (what sets T)."""
  return max(len(r.main.tokens) for row in rollouts for r in row) - 1


def main_batch(rollouts: Sequence[Sequence[Rollout]], scores: Scores, *,
               settings: PackSettings, scale: str = "group",
               eps: float = 1e-6, shards: Shards | None = None,
               longest: int | None = None) -> tuple[Batch, dict[str, float]]:
  """The main agent's batch [B*K] and its `signal` figures.

  With rollout `shards` (train/shards.py), `scores` are the whole step's
  and `rollouts` this process's shards' rows: each shard is packed into
  its own columns of every micro-batch (micro_batch / S rows), T set by
  `longest` (the step's, over every process); a batch of only some
  shards is `local`. Without: one shard, the whole step."""
  b, k = scores.main_reward.shape
  shards = shards or Shards(1, (0,), b)
  groups = np.repeat(np.arange(b, dtype=np.int32), k)
  adv = np.asarray(group_relative_advantages(
      scores.main_reward.reshape(-1).astype(np.float32), groups, b,
      scale=scale, eps=eps))
  if len(rollouts) != len(shards.mine) * shards.questions:
    raise ValueError(f"main_batch: {len(rollouts)} rows of rollouts for "
                     f"shards {list(shards.mine)} of {shards.questions} "
                     "questions each.")
  longest = longest_main(rollouts) if longest is None else longest
  micro = settings.micro_batch // shards.total
  columns = []
  for j, shard in enumerate(shards.mine):
    rows = rollouts[j * shards.questions:(j + 1) * shards.questions]
    flat = [r.main for row in rows for r in row]
    first = shard * shards.questions * k
    columns.append(pack(
        [t.tokens for t in flat], [t.loss_mask for t in flat],
        adv[first:first + len(flat)], micro_batch=micro,
        min_len=settings.min_len, max_len=settings.max_len,
        logprobs=[t.logprobs for t in flat],
        versions=[t.policy_version for t in flat], longest=longest))
  batch = side_by_side(columns, micro, b * k,
                       local=shards.partial)
  return batch, signal(adv, groups, b)


def _positions(b: np.ndarray, k: np.ndarray) -> np.ndarray:
  """int32 [M]: each call's place among its rollout's calls (record order)."""
  seen: dict[tuple[int, int], int] = {}
  out = np.zeros(len(b), np.int32)
  for i, key in enumerate(zip(np.asarray(b).tolist(),
                              np.asarray(k).tolist())):
    out[i] = seen.get(key, 0)
    seen[key] = out[i] + 1
  return out


@dataclasses.dataclass
class SubRecord:
  """Every sub trajectory of one step, flat (what the store carries)."""
  tokens: np.ndarray  # int32 [total ids], trajectories one after another.
  loss_mask: np.ndarray  # bool [total ids]
  logprobs: np.ndarray  # float32 [total ids]: the sampler's, 0 if not generated.
  version: np.ndarray  # int32 [M]: weight version that sampled each one.
  offsets: np.ndarray  # int64 [M + 1]: trajectory i is [offsets[i], offsets[i+1]).
  b: np.ndarray  # int32 [M]
  k: np.ndarray  # int32 [M]
  reward: np.ndarray  # float32 [M]
  num_questions: int
  group_size: int
  # int32 [M]: which sub-task each call did (`subtask_of`; None: its
  # position among its rollout's calls).
  subtask: np.ndarray | None = None
  # int32 [M]: the delegation each call answered, within its rollout (the
  # attempts of one delegation share it; None: every call its own).
  delegation: np.ndarray | None = None

  def to_arrays(self) -> dict[str, np.ndarray]:
    return {"tokens": self.tokens, "loss_mask": self.loss_mask,
            "logprobs": self.logprobs, "version": self.version,
            "offsets": self.offsets, "b": self.b, "k": self.k,
            "reward": self.reward, "subtask": self.subtasks(),
            "delegation": self.delegations(),
            "shape": np.array([self.num_questions, self.group_size])}

  def delegations(self) -> np.ndarray:
    """int32 [M]: `delegation`, or each call's position in its rollout."""
    if self.delegation is not None:
      return np.asarray(self.delegation, np.int32)
    return _positions(self.b, self.k)

  def subtasks(self) -> np.ndarray:
    """int32 [M]: `subtask`, or each call's position in its rollout."""
    if self.subtask is not None:
      return np.asarray(self.subtask, np.int32)
    return UNMATCHED + _positions(self.b, self.k)

  @classmethod
  def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "SubRecord":
    missing = sorted({"tokens", "loss_mask", "logprobs", "version", "offsets",
                      "b", "k", "reward", "shape"} - set(arrays))
    if missing:
      raise ValueError(f"sub-agent step record lacks {missing} (written by "
                       "an older version of mgrpo_jax?): start a new run "
                       "directory or store root.")
    b, k = (int(x) for x in arrays["shape"])
    return cls(arrays["tokens"], arrays["loss_mask"].astype(bool),
               arrays["logprobs"], arrays["version"], arrays["offsets"],
               arrays["b"], arrays["k"], arrays["reward"], b, k,
               arrays.get("subtask"), arrays.get("delegation"))

  @classmethod
  def concatenate(cls, parts: Sequence["SubRecord"]) -> "SubRecord":
    """One record of consecutive question ranges' records (the parts of a
    step that several processes rolled out, in process order): question
    indices shifted by the questions before, trajectories one after
    another. Equals the record of all the rollouts made in one place."""
    if not parts:
      raise ValueError("SubRecord.concatenate: no parts.")
    sizes = {p.group_size for p in parts}
    if len(sizes) > 1:
      raise ValueError(f"SubRecord.concatenate: parts of group sizes "
                       f"{sorted(sizes)}; expected one K.")
    if len(parts) == 1:
      return parts[0]
    first_b = np.cumsum([0] + [p.num_questions for p in parts])
    first_id = np.cumsum([0] + [len(p.tokens) for p in parts])
    return cls(
        np.concatenate([p.tokens for p in parts]).astype(np.int32),
        np.concatenate([p.loss_mask for p in parts]).astype(bool),
        np.concatenate([p.logprobs for p in parts]).astype(np.float32),
        np.concatenate([p.version for p in parts]).astype(np.int32),
        np.concatenate([parts[0].offsets[:1]] + [
            p.offsets[1:] + first_id[i] for i, p in enumerate(parts)]
                       ).astype(np.int64),
        np.concatenate([p.b + first_b[i] for i, p in enumerate(parts)]
                       ).astype(np.int32),
        np.concatenate([p.k for p in parts]).astype(np.int32),
        np.concatenate([p.reward for p in parts]).astype(np.float32),
        int(first_b[-1]), parts[0].group_size,
        np.concatenate([p.subtasks() for p in parts]).astype(np.int32),
        np.concatenate([p.delegations() for p in parts]).astype(np.int32))

  def trajectory(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, loss mask, sampler log-probs) of trajectory i."""
    lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
    return self.tokens[lo:hi], self.loss_mask[lo:hi], self.logprobs[lo:hi]


# Sub-task ids of calls that match no gold sub-question: UNMATCHED + their
# position among their rollout's calls (gold sub-questions are 0, 1, ...).
UNMATCHED = 64
GROUP_BY = ("question", "rollout", "subtask", "branch")


def subtask_of(task: Task | None, instruction: str, position: int) -> int:
  """Which sub-task a call did: the index of the gold sub-question of
  `task` its delegated `instruction` is (compared as normalised text),
  else UNMATCHED + `position` (its place among the rollout's calls)."""
  wanted = normalised(instruction)
  for g, step in enumerate(task.sub_questions if task is not None else ()):
    if normalised(step.question) == wanted:
      return g
  return UNMATCHED + position


def sub_record(rollouts: Sequence[Sequence[Rollout]], scores: Scores,
               tasks: Sequence[Task] | None = None) -> SubRecord:
  """Flattens the step's sub trajectories (order of `scores.sub_*`); with
  `tasks` (one per row of `rollouts`) each call's sub-task
  (`subtask_of`) goes with it."""
  b, k = scores.main_reward.shape
  trajectories = [rollouts[int(bb)][int(kk)].subs[int(i)]
                  for bb, kk, i in zip(scores.sub_b, scores.sub_k,
                                       scores.sub_i)]
  subtask = None
  if tasks is not None:
    subtask = np.array([subtask_of(tasks[int(bb)], t.instruction, int(i))
                        for bb, i, t in zip(scores.sub_b, scores.sub_i,
                                            trajectories)], np.int32)
  lengths = [len(t.tokens) for t in trajectories]
  offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
  def flat(field, dtype):
    return (np.concatenate([getattr(t, field) for t in trajectories])
            if trajectories else np.zeros(0)).astype(dtype)

  return SubRecord(flat("tokens", np.int32), flat("loss_mask", bool),
                   flat("logprobs", np.float32),
                   np.array([t.policy_version for t in trajectories],
                            np.int32), offsets,
                   scores.sub_b.astype(np.int32),
                   scores.sub_k.astype(np.int32),
                   scores.sub_reward.astype(np.float32), b, k, subtask,
                   np.array([t.sub_index - t.branch for t in trajectories],
                            np.int32))


def sub_groups(record: SubRecord, group_by: str
               ) -> tuple[np.ndarray, int]:
  """(group of each of the record's calls [M], number of groups): its
  question's, its rollout's, its (question, sub-task)'s, or its
  delegation's (the attempts of one delegation, `branches`)."""
  if group_by not in GROUP_BY:
    raise ValueError(f"sub_batch: group_by={group_by!r}; expected one of "
                     f"{list(GROUP_BY)}.")
  b, k = record.num_questions, record.group_size
  if group_by == "question":
    return record.b.astype(np.int32), b
  if group_by == "rollout":
    return (record.b * k + record.k).astype(np.int32), b * k
  if not len(record.b):  # No call this step: no group.
    return np.zeros(0, np.int32), 1
  pairs = (np.stack([record.b, record.subtasks()], axis=1)
           if group_by == "subtask" else np.stack(
               [record.b, record.k, record.delegations()], axis=1))
  keys, groups = np.unique(pairs, axis=0, return_inverse=True)
  return groups.reshape(-1).astype(np.int32), max(len(keys), 1)


def unaligned_sub_batch(record: SubRecord, *, settings: PackSettings,
                        group_by: str = "question", scale: str = "group",
                        eps: float = 1e-6) -> tuple[Batch, dict[str, float]]:
  """Alignment off (an ablation): one row per sub-agent call as it came, so
  the batch has as many rows as the step had calls (a shape that changes
  from step to step); advantages over the same groups as `sub_batch`."""
  b, k = record.num_questions, record.group_size
  m = len(record.reward)
  counts = np.bincount(record.b * k + record.k, minlength=b * k)
  groups, num_groups = sub_groups(record, group_by)
  valid = np.ones(max(m, 1), bool)
  valid[m:] = False
  adv = np.asarray(group_relative_advantages(
      np.pad(record.reward, (0, max(m, 1) - m)).astype(np.float32),
      np.pad(groups, (0, max(m, 1) - m)).astype(np.int32),
      num_groups, valid_N=valid, scale=scale, eps=eps))
  empty = (np.zeros(2, np.int32), np.zeros(2, bool), np.zeros(2, np.float32))
  slots = [record.trajectory(i) for i in range(m)] or [empty]
  tokens, masks, logprobs = zip(*slots)
  versions = record.version if m else np.full(1, -1)
  batch = pack(tokens, masks, adv, micro_batch=settings.micro_batch,
               min_len=settings.min_len, max_len=settings.max_len,
               valid=valid, logprobs=logprobs, versions=versions)
  stats = {"calls_per_rollout": float(counts.mean()), "valid_slots": 1.0,
           "dropped_calls": 0.0,
           **signal(adv[:m], groups, num_groups)}
  return batch, stats


def _call_slots(record: SubRecord, key: jax.Array, d_max: int, fill: str
                ) -> tuple[np.ndarray, np.ndarray]:
  """(call of each slot [B*K, D], valid [B*K, D]): D_max calls per rollout
  (core.alignment), each slot one call."""
  b, k = record.num_questions, record.group_size
  rollout_of = record.b * k + record.k  # Flat rollout index of each sub.
  order = np.argsort(rollout_of, kind="stable")  # Alignment wants grouping.
  counts = np.bincount(rollout_of, minlength=b * k).astype(np.int32)
  index, valid = align_sub_trajectories(
      key, counts, d_max, fill=fill,
      rewards_M=record.reward[order] if fill == "best" else None)
  index, valid = np.asarray(index), np.asarray(valid)  # [B*K, D]
  return (order[index] if len(order) else np.zeros_like(index)), valid


def _delegation_slots(record: SubRecord, key: jax.Array, d_max: int,
                      fill: str) -> tuple[np.ndarray, np.ndarray]:
  """The same for branch groups: whole delegations are aligned (D_max /
  attempts of them per rollout), each filling as many adjacent slots as it
  has attempts, so a group is never split by the alignment (a group of one
  attempt compares nothing)."""
  b, k = record.num_questions, record.group_size
  rollout_of = (record.b * k + record.k).astype(np.int64)
  delegation = record.delegations().astype(np.int64)
  order = np.lexsort((delegation, rollout_of))  # Rollout, then delegation.
  keys = np.stack([rollout_of[order], delegation[order]], axis=1)
  _, first, sizes = np.unique(keys, axis=0, return_index=True,
                              return_counts=True)
  width = int(sizes.max())
  if d_max < width:
    raise ValueError(f"sub_batch: d_max={d_max} slots per rollout cannot "
                     f"hold one delegation's {width} attempts with "
                     "group_by='branch'; expected d_max >= the attempts "
                     "(agents.sub_branches), a multiple of them.")
  unit_rollout = keys[first, 0]
  counts = np.bincount(unit_rollout, minlength=b * k).astype(np.int32)
  unit_reward = np.add.reduceat(record.reward[order], first) / sizes
  index, valid_u = align_sub_trajectories(
      key, counts, d_max // width, fill=fill,
      rewards_M=unit_reward.astype(np.float32) if fill == "best" else None)
  index, valid_u = np.asarray(index), np.asarray(valid_u)  # [B*K, U]
  attempt = np.arange(width)
  position = first[index][..., None] + attempt  # [B*K, U, width]
  valid = valid_u[..., None] & (attempt < sizes[index][..., None])
  slot_sub = order[np.where(valid, position, first[index][..., None])]
  pad = d_max - index.shape[1] * width  # Slots no whole delegation fits.
  slot_sub = np.pad(slot_sub.reshape(b * k, -1), ((0, 0), (0, pad)))
  valid = np.pad(valid.reshape(b * k, -1), ((0, 0), (0, pad)))
  return slot_sub, valid


def sub_batch(record: SubRecord, key: jax.Array, *, d_max: int,
              settings: PackSettings, fill: str = "random",
              group_by: str = "question", scale: str = "group",
              eps: float = 1e-6) -> tuple[Batch, dict[str, float]]:
  """The sub-agent's aligned batch [B*K*D_max] (see the module docstring);
  d_max 0: alignment off (`unaligned_sub_batch`). With group_by="branch"
  the alignment keeps a delegation's attempts together."""
  call_groups, num_groups = sub_groups(record, group_by)
  if d_max == 0:
    return unaligned_sub_batch(record, settings=settings, group_by=group_by,
                               scale=scale, eps=eps)
  b, k = record.num_questions, record.group_size
  counts = np.bincount(record.b * k + record.k,
                       minlength=b * k).astype(np.int32)
  calls = len(record.reward)
  slot_sub, valid = (_delegation_slots if group_by == "branch" and calls
                     else _call_slots)(record, key, d_max, fill)
  slot_reward = np.where(valid, record.reward[slot_sub] if calls
                         else 0.0, 0.0).astype(np.float32)
  # Each slot's group: its call's (an empty slot's is never read).
  groups = (call_groups[slot_sub.reshape(-1)] if calls
            else np.zeros(slot_sub.size, np.int32))
  adv = np.asarray(group_relative_advantages(
      slot_reward.reshape(-1), groups.astype(np.int32), num_groups,
      valid_N=valid.reshape(-1), scale=scale, eps=eps))
  empty = (np.zeros(2, np.int32), np.zeros(2, bool), np.zeros(2, np.float32))
  slots = [record.trajectory(int(s)) if ok else empty
           for s, ok in zip(slot_sub.reshape(-1), valid.reshape(-1))]
  versions = np.where(valid.reshape(-1), record.version[slot_sub.reshape(-1)]
                      if calls else -1, -1)
  tokens, masks, logprobs = zip(*slots)
  batch = pack(tokens, masks, adv, micro_batch=settings.micro_batch,
               min_len=settings.min_len, max_len=settings.max_len,
               valid=valid.reshape(-1), logprobs=logprobs, versions=versions)
  stats = {"calls_per_rollout": float(counts.mean()),
           "valid_slots": float(valid.mean()),
           "dropped_calls": float(calls - len(np.unique(slot_sub[valid]))),
           **signal(adv, groups, num_groups, valid.reshape(-1))}
  return batch, stats
