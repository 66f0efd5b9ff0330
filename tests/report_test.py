"""Evaluation figures: pass@1, avg@k, pass@k and the breakdowns."""

import numpy as np
import pytest

from mgrpo_jax.agents import report
from mgrpo_jax.agents.rewards import Scores
from mgrpo_jax.agents.trajectory import Rollout, Trajectory
from mgrpo_jax.data.task import Task


def trajectory(b, k, i, generated, finish="answer"):
  mask = np.array([False] * 3 + [True] * generated)
  return Trajectory("main" if i < 0 else "sub", f"q{b}", b, k, i, "x",
                    np.zeros(mask.shape, np.int32), mask,
                    np.zeros(mask.shape, np.float32), 3, [], None, True,
                    finish)


def test_figures_by_hand():
  tasks = [Task("q0", "?", ("a",), "t", level="1", hops=1),
           Task("q1", "?", ("a",), "t", level="2", hops=2),
           Task("q2", "?", ("a",), "t", level="2", hops=2)]
  correct = np.array([[1, 1, 0], [0, 1, 0], [0, 0, 0]], bool)
  subs = np.array([[0, 1, 2], [1, 1, 1], [0, 0, 0]], np.int32)
  rollouts = [[Rollout(trajectory(b, k, -1, 10, "answer" if k else
                                  "turn_limit"),
                       [trajectory(b, k, i, 5) for i in range(subs[b, k])])
               for k in range(3)] for b in range(3)]
  scores = Scores(correct * 0.9 + 0.1, correct, np.ones((3, 3), bool), subs,
                  *[np.zeros(0)] * 6)
  m = report.summarize(tasks, rollouts, scores)
  assert m["pass@1"] == pytest.approx(1 / 3)  # Only q0's first rollout.
  assert m["avg@3"] == pytest.approx(3 / 9)
  assert m["pass@3"] == pytest.approx(2 / 3)
  assert m["sub_calls_per_rollout"] == pytest.approx(6 / 9)
  assert m["main_tokens_per_question"] == 30
  assert m["sub_tokens_per_question"] == pytest.approx(5 * 6 / 3)
  assert m["finish/turn_limit"] == pytest.approx(1 / 3)
  assert m["by_level/2/pass@3"] == pytest.approx(0.5)
  assert m["by_hops/1/avg@3"] == pytest.approx(2 / 3)
  assert m["by_hops/2/questions"] == 2
  table = report.format_table(m)
  assert "pass@1" in table and "by_level/2" in table
  with pytest.raises(ValueError, match="no tasks"):
    report.summarize([], [], scores)
