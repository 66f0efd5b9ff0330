"""Scored rollouts -> the main batch and the aligned sub-agent batch."""

import jax
import numpy as np
import pytest

from agent_test_utils import (rewards_main_script, rewards_sub_script,
                              rewards_tasks, team)
from model_test_utils import tiny_tokenizer
from mgrpo_jax.agents.rewards import RuleExpert, score_rollouts
from mgrpo_jax.core.rewards import reward_weights
from mgrpo_jax.data.corpus import Document, LocalCorpus
from mgrpo_jax.train import batches
from mgrpo_jax.train.batches import (PackSettings, SubRecord, main_batch,
                                        signal, sub_batch, sub_record)
from mgrpo_jax.train.shards import Shards

SETTINGS = PackSettings(micro_batch=4, min_len=16, max_len=4096)


@pytest.fixture(scope="module")
def scored():
  tok = tiny_tokenizer()
  controller, *_ = team(tok, LocalCorpus([Document("d", "D", "text")]),
                        rewards_main_script, rewards_sub_script)
  tasks = rewards_tasks()  # q0: 2 calls per rollout, right; q1: 1, wrong.
  rollouts = controller.run(tasks, group_size=2, key=jax.random.key(0))
  scores = score_rollouts(rollouts, tasks, reward_weights("with_expert"),
                          expert=RuleExpert())
  return rollouts, scores


def test_main_batch_advantages_over_each_questions_rollouts(scored):
  rollouts, scores = scored
  batch, figures = main_batch(rollouts, scores, settings=SETTINGS)
  # Both rollouts of a question got the same reward: no spread, advantage 0.
  np.testing.assert_array_equal(batch.adv_N[:4], np.zeros(4))
  assert figures == {"informative_groups": 0.0, "informative_rows": 0.0}
  assert batch.inputs_NxT.shape[0] == 4
  np.testing.assert_array_equal(
      batch.mask_NxT.sum(1), [r.main.loss_mask[1:].sum()
                              for row in rollouts for r in row])


def test_sub_record_round_trips_through_arrays(scored):
  """Ids, masks, the sampler's log-probs and weight versions all travel."""
  rollouts, scores = scored
  for i, sub in enumerate(s for row in rollouts for r in row for s in r.subs):
    sub.logprobs = np.where(sub.loss_mask, -0.5 - i, 0.0).astype(np.float32)
    sub.policy_version = 10 + i
  record = sub_record(rollouts, scores)
  arrays = record.to_arrays()
  again = SubRecord.from_arrays(arrays)
  assert len(again.offsets) == 7  # 6 sub trajectories.
  for i, (b, k, s) in enumerate(zip(scores.sub_b, scores.sub_k,
                                    scores.sub_i)):
    tokens, mask, logprobs = again.trajectory(i)
    expected = rollouts[b][k].subs[s]
    np.testing.assert_array_equal(tokens, expected.tokens)
    np.testing.assert_array_equal(mask, expected.loss_mask)
    np.testing.assert_array_equal(logprobs, expected.logprobs)
    assert again.version[i] == expected.policy_version
  # The aligned batch packs them next to their targets.
  batch, _ = sub_batch(again, jax.random.key(0), d_max=1, settings=SETTINGS)
  for row in range(4):
    n = int(batch.mask_NxT[row].sum())
    assert n > 0 and np.all(batch.behaviour_NxT[row][
        batch.mask_NxT[row] > 0] < -0.4)
    assert batch.version_N[row] >= 10
  del arrays["logprobs"]
  with pytest.raises(ValueError, match="lacks \\['logprobs'\\]"):
    SubRecord.from_arrays(arrays)


@pytest.mark.parametrize("d_max", [1, 2, 3])
def test_sub_batch_is_aligned_to_b_k_dmax(scored, d_max):
  rollouts, scores = scored
  record = sub_record(rollouts, scores)
  batch, stats = sub_batch(record, jax.random.key(1), d_max=d_max,
                           settings=SETTINGS)
  rows = 2 * 2 * d_max
  assert batch.inputs_NxT.shape[0] == -(-rows // 4) * 4
  assert stats["calls_per_rollout"] == 1.5
  assert stats["dropped_calls"] == max(2 - d_max, 0) * 2
  # q0's rollouts have reports of mixed quality (expert 1 / 0): advantages
  # spread within question 0; q1's sub rewards are all equal: zero.
  adv = batch.adv_N[:rows].reshape(2, 2, d_max)
  assert np.abs(adv[1]).max() == 0
  if d_max >= 2:
    assert np.abs(adv[0]).max() > 0
  # Every slot is valid (every rollout made at least one call).
  assert batch.num_sequences == rows


def empty_record():
  """A step of 2 questions x 2 rollouts in which no rollout delegated."""
  return SubRecord(np.zeros(0, np.int32), np.zeros(0, bool),
                   np.zeros(0, np.float32), np.zeros(0, np.int32),
                   np.zeros(1, np.int64), np.zeros(0, np.int32),
                   np.zeros(0, np.int32), np.zeros(0, np.float32), 2, 2)


@pytest.mark.parametrize("fill", ["random", "best"])
def test_rollouts_without_calls_give_invalid_slots(fill):
  record = empty_record()
  batch, stats = sub_batch(record, jax.random.key(0), d_max=2,
                           settings=SETTINGS, fill=fill)
  assert batch.num_sequences == 0 and batch.mask_NxT.sum() == 0
  assert stats["calls_per_rollout"] == 0
  with pytest.raises(ValueError, match="group_by='x'"):
    sub_batch(record, jax.random.key(0), d_max=2, settings=SETTINGS,
              group_by="x")


def test_alignment_off_gives_one_row_per_call(scored):
  """d_max 0 (the ablation): every call once, no duplicate, none dropped;
  the advantages are group-relative over the same question groups."""
  rollouts, scores = scored
  record = sub_record(rollouts, scores)
  batch, stats = sub_batch(record, jax.random.key(1), d_max=0,
                           settings=SETTINGS)
  calls = len(record.reward)  # 6: q0 2 calls x 2 rollouts, q1 1 x 2.
  assert calls == 6 and batch.num_sequences == calls
  assert batch.inputs_NxT.shape[0] == -(-calls // 4) * 4
  assert stats == {"calls_per_rollout": 1.5, "valid_slots": 1.0,
                   "dropped_calls": 0.0,
                   **signal(batch.adv_N[:calls], record.b, 2)}
  for i in range(calls):
    tokens, mask, _ = record.trajectory(i)
    assert int(batch.mask_NxT[i].sum()) == int(mask[1:].sum())
  adv = batch.adv_N[:calls]
  for question in (0, 1):
    rows = record.b == question
    rewards = record.reward[rows]
    expected = (rewards - rewards.mean()) / (rewards.std(ddof=1) + 1e-6)
    np.testing.assert_allclose(adv[rows], expected, atol=1e-5)
  assert np.abs(adv[record.b == 0]).max() > 0


def test_alignment_off_without_calls_has_no_valid_row():
  record = empty_record()
  batch, stats = sub_batch(record, jax.random.key(0), d_max=0,
                           settings=SETTINGS)
  assert batch.num_sequences == 0 and batch.mask_NxT.sum() == 0
  assert stats["calls_per_rollout"] == 0


def test_signal_counts_groups_and_rows_with_a_nonzero_advantage():
  adv = np.array([0.0, 0.0, 1.0, -1.0, 0.0, 0.0, 0.5, 0.0])
  groups = np.array([0, 0, 1, 1, 2, 2, 3, 3])
  assert signal(adv, groups, 4) == {"informative_groups": 0.5,
                                    "informative_rows": 3 / 8}
  # Invalid rows neither count nor make their group informative; a group
  # with no row at all (5 of 6) is not informative.
  valid = np.array([1, 1, 1, 1, 1, 1, 0, 0], bool)
  assert signal(adv, groups, 6, valid) == {"informative_groups": 1 / 6,
                                           "informative_rows": 2 / 6}
  assert signal(np.zeros(0), np.zeros(0, int), 0) == {
      "informative_groups": 0.0, "informative_rows": 0.0}


def test_sub_batch_reports_its_signal(scored):
  rollouts, scores = scored
  record = sub_record(rollouts, scores)
  for d_max in (0, 2):
    batch, stats = sub_batch(record, jax.random.key(1), d_max=d_max,
                             settings=SETTINGS)
    valid = batch.mask_NxT.sum(1) > 0
    moving = (batch.adv_N != 0) & valid
    assert stats["informative_rows"] == pytest.approx(
        moving.sum() / valid.sum())
    assert 0.0 <= stats["informative_groups"] <= 1.0


def test_records_of_question_ranges_concatenate_to_the_whole_steps(scored):
  """A step rolled out by several processes (a question range each) stores
  one record per process; joined in order they are the one-place record."""
  rollouts, _ = scored
  tasks = rewards_tasks()
  weights = reward_weights("with_expert")
  whole = sub_record(rollouts, score_rollouts(rollouts, tasks, weights,
                                              expert=RuleExpert()))
  parts = [sub_record(rollouts[i:i + 1],
                      score_rollouts(rollouts[i:i + 1], tasks[i:i + 1],
                                     weights, expert=RuleExpert()))
           for i in range(len(tasks))]
  assert [p.num_questions for p in parts] == [1, 1]
  joined = SubRecord.concatenate(parts)
  for name, want in whole.to_arrays().items():
    got = joined.to_arrays()[name]
    assert got.dtype == want.dtype, name
    np.testing.assert_array_equal(got, want, err_msg=name)
  assert SubRecord.concatenate(parts[:1]) is parts[0]
  with pytest.raises(ValueError, match="no parts"):
    SubRecord.concatenate([])
  other = SubRecord.from_arrays({**parts[1].to_arrays(),
                                 "shape": np.array([1, 3])})
  with pytest.raises(ValueError, match=r"group sizes \[2, 3\]"):
    SubRecord.concatenate([parts[0], other])


def test_a_main_batch_of_shards_is_the_same_batch_whatever_holds_them(scored):
  """Rollout shards (train/shards.py): each shard fills its own columns of
  every micro-batch, so the batch one process packs from both shards is
  the one two processes (a shard each) pack as their columns."""
  rollouts, scores = scored
  both = Shards(2, (0, 1), 1)
  whole, figures = main_batch(rollouts, scores, settings=SETTINGS,
                              shards=both)
  assert not whole.local and whole.num_rows == 4
  longest = batches.longest_main(rollouts)
  halves = [main_batch(rollouts[s:s + 1], scores, settings=SETTINGS,
                       shards=Shards(2, (s,), 1), longest=longest)
            for s in (0, 1)]
  assert all(h.local and h.num_rows == 4 for h, _ in halves)
  assert all(f == figures for _, f in halves)  # The whole step's signal.
  for name in ("inputs_NxT", "targets_NxT", "mask_NxT", "adv_N",
               "behaviour_NxT", "version_N"):
    # Process p's rows [U, M/2, ...] are columns p of the global [U, M, ...].
    got = np.concatenate([getattr(h, name).reshape(
        -1, 2, *getattr(h, name).shape[1:]) for h, _ in halves], axis=1)
    np.testing.assert_array_equal(
        got.reshape(-1, *got.shape[2:]), getattr(whole, name), err_msg=name)
  # Micro-batch 0 holds question 0's rollouts in columns 0-1, question 1's
  # in columns 2-3: the rows of a one-shard batch, placed by shard.
  one, _ = main_batch(rollouts, scores, settings=SETTINGS)
  assert sorted(map(tuple, whole.inputs_NxT[:4])) == sorted(
      map(tuple, one.inputs_NxT[:4]))
  with pytest.raises(ValueError, match=r"1 rows of rollouts for shards"):
    main_batch(rollouts[:1], scores, settings=SETTINGS, shards=both)


def two_hop_record(rewards, subtask=None):
  """One question, K=2 rollouts of two calls each (hop 1, then hop 2),
  rewards in (rollout, call) order."""
  ids = np.arange(8, dtype=np.int32) % 5 + 1
  return SubRecord(ids, np.ones(8, bool), np.zeros(8, np.float32),
                   np.zeros(4, np.int32), np.arange(0, 10, 2, dtype=np.int64),
                   np.zeros(4, np.int32), np.array([0, 0, 1, 1], np.int32),
                   np.asarray(rewards, np.float32), 1, 2, subtask)


@pytest.mark.parametrize("d_max", [0, 2])
def test_subtask_groups_keep_hops_apart(d_max):
  # Every hop-1 call was rewarded 1 and every hop-2 call 0: grouped by
  # question, hop-1 calls are pushed up and hop-2 calls down for what they
  # are, not for how well they did; grouped by sub-task, each group's
  # rewards are equal and nothing is learned.
  record = two_hop_record([1, 0, 1, 0], np.array([0, 1, 0, 1], np.int32))
  kwargs = dict(d_max=d_max, settings=SETTINGS, fill="best")
  by_question, q_stats = sub_batch(record, jax.random.key(0), **kwargs)
  by_subtask, s_stats = sub_batch(record, jax.random.key(0),
                                  group_by="subtask", **kwargs)
  assert np.abs(by_question.adv_N[:4]).min() > 0
  assert q_stats["informative_groups"] == 1.0
  np.testing.assert_array_equal(by_subtask.adv_N[:4], np.zeros(4))
  assert s_stats["informative_groups"] == 0.0
  # A sub-task whose two attempts differ is a clean, informative group.
  mixed = two_hop_record([1, 0, 0, 0], np.array([0, 1, 0, 1], np.int32))
  batch, stats = sub_batch(mixed, jax.random.key(0), group_by="subtask",
                           **kwargs)
  assert stats["informative_groups"] == 0.5
  np.testing.assert_allclose(np.sort(batch.adv_N[:4]),
                             [-0.70710, 0.0, 0.0, 0.70710], atol=1e-4)


def test_a_call_s_subtask_is_its_gold_sub_question_or_its_place():
  task = rewards_tasks()[0]
  gold = task.sub_questions
  assert batches.subtask_of(task, gold[1].question.upper() + " ", 0) == 1
  assert batches.subtask_of(task, "something else", 1) == (
      batches.UNMATCHED + 1)
  assert batches.subtask_of(None, gold[0].question, 0) == batches.UNMATCHED
  # A record without sub-tasks (written before them) groups by place.
  old = two_hop_record([1, 0, 1, 0])
  np.testing.assert_array_equal(old.subtasks(), batches.UNMATCHED + np.array(
      [0, 1, 0, 1]))
  again = SubRecord.from_arrays(old.to_arrays())
  np.testing.assert_array_equal(again.subtasks(), old.subtasks())


def test_branch_groups_are_the_attempts_of_one_delegation():
  # Rollout 0's delegation had two attempts (rewards 1, 0) and rollout 1's
  # two (0, 0): one informative group of two, whatever the question did.
  record = two_hop_record([1, 0, 0, 0])
  record.delegation = np.array([0, 0, 0, 0], np.int32)
  batch, stats = sub_batch(record, jax.random.key(0), d_max=2,
                           settings=SETTINGS, group_by="branch", fill="best")
  assert stats["informative_groups"] == 0.5
  np.testing.assert_allclose(np.sort(batch.adv_N[:4]),
                             [-0.70710, 0.0, 0.0, 0.70710], atol=1e-4)
  again = SubRecord.from_arrays(record.to_arrays())
  np.testing.assert_array_equal(again.delegations(), [0, 0, 0, 0])
  # Without attempts (each call its own delegation) nothing is compared.
  _, alone = sub_batch(two_hop_record([1, 0, 0, 0]), jax.random.key(0),
                       d_max=2, settings=SETTINGS, group_by="branch")
  assert alone["informative_groups"] == 0.0


@pytest.mark.parametrize("group_by", ["subtask", "branch"])
def test_a_step_without_calls_has_no_group(group_by):
  record = empty_record()
  batch, stats = sub_batch(record, jax.random.key(0), d_max=2,
                           settings=SETTINGS, group_by=group_by)
  assert batch.num_sequences == 0 and stats["informative_groups"] == 0.0


def branched_record(rewards):
  """One question, K=2 rollouts, each of two delegations attempted three
  times (12 calls), rewards in (rollout, delegation, attempt) order; each
  call's tokens hold its flat index, to find it in the batch."""
  m = 12
  ids = np.repeat(np.arange(1, m + 1, dtype=np.int32), 2)
  return SubRecord(ids, np.ones(2 * m, bool), np.zeros(2 * m, np.float32),
                   np.zeros(m, np.int32),
                   np.arange(0, 2 * m + 1, 2, dtype=np.int64),
                   np.zeros(m, np.int32), np.repeat([0, 1], 6).astype(np.int32),
                   np.asarray(rewards, np.float32), 1, 2, None,
                   np.tile(np.repeat([0, 1], 3), 2).astype(np.int32))


@pytest.mark.parametrize("d_max, delegations", [(3, 1), (4, 1), (6, 2)])
def test_branch_alignment_keeps_a_delegation_s_attempts_together(
    d_max, delegations):
  rewards = [1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 1]
  record = branched_record(rewards)
  batch, stats = sub_batch(record, jax.random.key(3), d_max=d_max,
                           settings=SETTINGS, group_by="branch")
  rows = batch.version_N >= 0  # Valid slots (an empty one's version is -1).
  kept = batch.inputs_NxT[rows, 0] - 1  # Flat call index per row.
  # Whole delegations only: each kept call's two siblings are kept too.
  assert len(kept) == 2 * delegations * 3
  for call in kept:
    first = call - call % 3
    assert {first, first + 1, first + 2} <= set(kept.tolist())
  assert stats["dropped_calls"] == 12 - len(kept)
  # Every kept group has a 1 and a 0: all informative.
  assert stats["informative_rows"] == 1.0


def test_branch_alignment_refuses_slots_a_delegation_cannot_fill():
  with pytest.raises(ValueError, match="d_max=2 slots per rollout cannot "
                     "hold one delegation's 3 attempts"):
    sub_batch(branched_record([0] * 12), jax.random.key(0), d_max=2,
              settings=SETTINGS, group_by="branch")
