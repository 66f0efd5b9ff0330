"""Branching end to end (agents.sub_branches with advantage.sub_group_by=
"branch"): each delegation is attempted several times from the same state,
the attempts form the sub-agent's groups, the planner goes on with one."""

import pytest

from scripted_test import two_hop_config, run


@pytest.mark.slow  # Fast siblings: batches_test's branch alignment tests.
def test_branch_groups_train_the_sub_agent_on_every_attempt(tmp_path,
                                                            monkeypatch):
  config = two_hop_config(tmp_path, scripted="main")
  config.mode = "frozen_main"
  config.reward.v_main, config.reward.v_fmt, config.reward.v_exp = 0., 0., 1.
  config.advantage.sub_group_by = "branch"
  config.agents.sub_branches = 3
  config.align.d_max = 6  # Both delegations' three attempts.
  steps = run(config, tmp_path, monkeypatch)
  trained = steps[1]
  # The scripted planner delegates each hop once per rollout; every
  # delegation got three attempts, all trained on.
  calls = (trained["sub/calls_per_rollout"] * config.train.questions_per_step
           * config.train.group_size)
  assert calls > 0 and calls % 3 == 0
  # Each rollout's six slots hold its delegations' attempts whole.
  assert trained["align/dropped_calls"] == 0.0
  assert trained["sub/sequences"] >= calls  # Free slots hold duplicates.
  assert "sub/loss" in trained and "main/loss" not in trained
  # Evaluation stays one attempt per delegation (greedy, no groups).
  assert steps[0]["eval/main_delegations_hop2"] == 2.0
