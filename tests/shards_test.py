"""A step's rollout shards: the plan per process, keys, and joined scores."""

import jax
import ml_collections
import numpy as np
import pytest

from mgrpo_jax.agents.rewards import Scores
from mgrpo_jax.runtime.config_checks import ConfigError
from mgrpo_jax.train import shards as shards_lib


def _config(shards=0, b=8, micro=4):
  return ml_collections.ConfigDict({
      "train": {"rollout_shards": shards, "questions_per_step": b},
      "learner": {"main": {"micro_batch": micro}}})


def _scores(b, calls, first=0.0):
  """Scores of b questions x 2 rollouts; `calls` sub calls on rollout 0."""
  return Scores(
      main_reward=np.full((b, 2), first, np.float32),
      main_correct=np.zeros((b, 2), bool),
      main_format_ok=np.ones((b, 2), bool),
      sub_calls=np.tile(np.array([[calls, 0]], np.int32), (b, 1)),
      sub_b=np.repeat(np.arange(b, dtype=np.int32), calls),
      sub_k=np.zeros(b * calls, np.int32),
      sub_i=np.tile(np.arange(calls, dtype=np.int32), b),
      sub_reward=np.linspace(0, 1, b * calls).astype(np.float32),
      sub_format_ok=np.ones(b * calls, bool),
      sub_expert=np.zeros(b * calls, np.float32))


def test_each_process_takes_consecutive_whole_shards():
  assert shards_lib.plan(_config(), 1, 0) == shards_lib.Shards(1, (0,), 8)
  assert shards_lib.plan(_config(), 2, 1) == shards_lib.Shards(2, (1,), 4)
  plan = shards_lib.plan(_config(4), 2, 1)
  assert plan == shards_lib.Shards(4, (2, 3), 2)
  assert plan.first_question == 4
  assert plan.tasks(list("abcdefgh"), 3) == ["g", "h"]
  # Only some of the shards: the process packs its own rows (Batch.local).
  assert plan.partial
  assert not shards_lib.plan(_config(2), 1, 0).partial


def test_an_evaluation_s_questions_split_into_consecutive_covering_ranges():
  # Evaluation lists need not divide by S: the ranges round, and cover all.
  plan = shards_lib.Shards(3, (0, 1, 2), 4)
  parts = [plan.tasks(list(range(10)), s) for s in plan.mine]
  assert parts == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
  assert shards_lib.ONE.tasks(list("abc"), 0) == ["a", "b", "c"]


def test_one_shard_keeps_the_rollout_key_and_shards_fold_theirs_in():
  key = jax.random.key(3)
  one = shards_lib.plan(_config(), 1, 0)
  assert (jax.random.key_data(one.key(key, 0))
          == jax.random.key_data(key)).all()
  two = shards_lib.plan(_config(2), 1, 0)
  keys = [jax.random.key_data(two.key(key, s)) for s in (0, 1)]
  assert not (keys[0] == keys[1]).all()
  assert (keys[1] == jax.random.key_data(jax.random.fold_in(key, 1))).all()


@pytest.mark.parametrize("shards, processes, b, micro, match", [
    (-1, 1, 8, 4, r"rollout_shards=-1: expected an integer >= 0"),
    (True, 1, 8, 4, r"rollout_shards=True"),
    (3, 2, 9, 3, r"=3: expected a multiple of the main role's 2 processes"),
    (3, 1, 8, 3, r"=3: expected a divisor of train.questions_per_step=8"),
    (4, 1, 8, 2, r"=4: expected a divisor of learner.main.micro_batch=2"),
    (0, 3, 8, 4, r"=0 \(one shard per process: 3\): expected a divisor of "
                 r"train.questions_per_step=8 .* and a divisor of "
                 r"learner.main.micro_batch=4"),
])
def test_shards_that_cannot_split_evenly_are_refused(shards, processes, b,
                                                     micro, match):
  with pytest.raises(ConfigError, match=match):
    shards_lib.plan(_config(shards, b, micro), processes, 0)


def test_scores_of_question_ranges_join_and_travel_as_json():
  first, second = _scores(2, 2, 0.5), _scores(1, 3, 1.0)
  joined = Scores.concatenate([first, second])
  assert joined.main_reward.shape == (3, 2)
  np.testing.assert_array_equal(joined.sub_b, [0, 0, 1, 1, 2, 2, 2])
  np.testing.assert_array_equal(joined.sub_i, [0, 1, 0, 1, 0, 1, 2])
  again = shards_lib.from_json(shards_lib.to_json(joined))
  for name in Scores.__dataclass_fields__:
    want, got = getattr(joined, name), getattr(again, name)
    assert got.dtype == want.dtype and got.shape == want.shape, name
    np.testing.assert_array_equal(got, want, err_msg=name)
  assert Scores.concatenate([first]) is first
  # One process: its scores are the step's.
  assert shards_lib.gather_scores("scores", first) is first
