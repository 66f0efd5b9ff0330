"""Rewards wired to rollouts: main and sub rewards, experts, judges."""

import dataclasses

import jax
import numpy as np
import pytest

from agent_test_utils import (ScriptedResult, rewards_main_script,
                              rewards_sub_script, rewards_tasks, team)
from model_test_utils import tiny_config, tiny_tokenizer
from mgrpo_jax.agents.rewards import (ExpertItem, ModelJudge, RuleExpert,
                                      is_correct, score_rollouts)
from mgrpo_jax.core.rewards import reward_weights
from mgrpo_jax.data.corpus import Document, LocalCorpus

KEY = jax.random.key(0)


@pytest.fixture(scope="module")
def tok():
  return tiny_tokenizer()


def _rollouts(tok):
  """The scripted team's rollouts of the two reward tasks, K = 2."""
  corpus = LocalCorpus([Document("d", "D", "text")])
  controller, *_ = team(tok, corpus, rewards_main_script,
                         rewards_sub_script)
  tasks = rewards_tasks()
  return controller.run(tasks, group_size=2, key=KEY), tasks


def test_main_and_sub_rewards_follow_the_method(tok):
  rollouts, tasks = _rollouts(tok)
  weights = reward_weights("with_expert")
  scores = score_rollouts(rollouts, tasks, weights, expert=RuleExpert())
  np.testing.assert_array_equal(scores.main_correct, [[1, 1], [0, 0]])
  np.testing.assert_array_equal(scores.main_format_ok, [[1, 1], [0, 0]])
  np.testing.assert_allclose(scores.main_reward, [[1.0, 1.0], [0.0, 0.0]])
  np.testing.assert_array_equal(scores.sub_calls, [[2, 2], [1, 1]])
  np.testing.assert_array_equal(scores.sub_b, [0, 0, 0, 0, 1, 1])
  np.testing.assert_array_equal(scores.sub_k, [0, 0, 1, 1, 0, 1])
  np.testing.assert_array_equal(scores.sub_i, [0, 1, 0, 1, 0, 0])
  # Report "It is Beta." states a gold step answer; "Unknown." does not.
  np.testing.assert_array_equal(scores.sub_expert, [1, 0, 1, 0, 0, 0])
  # R_S = 0.1 + 0.6 * correct_M(k) + 0.3 * expert.
  np.testing.assert_allclose(scores.sub_reward,
                             [1.0, 0.7, 1.0, 0.7, 0.1, 0.1], atol=1e-6)
  plain = score_rollouts(rollouts, tasks, reward_weights("mgrpo"))
  np.testing.assert_allclose(plain.sub_reward, [1, 1, 1, 1, 0.1, 0.1],
                             atol=1e-6)


def test_a_new_number_of_sub_calls_does_not_recompile(tok):
  """M changes every step; the rewards pad it to a bucket, so scoring a
  step with a different M (same bucket) compiles nothing new."""
  from mgrpo_jax.runtime.metrics import compilations, count_compilations
  count_compilations()
  rollouts, tasks = _rollouts(tok)
  weights = reward_weights("with_expert")
  first = score_rollouts(rollouts, tasks, weights, expert=RuleExpert())
  # The same B x K rollouts with one delegation fewer: M = 5 instead of 6.
  fewer_subs = [list(row) for row in rollouts]
  fewer_subs[0][0] = dataclasses.replace(rollouts[0][0],
                                         subs=rollouts[0][0].subs[1:])
  before = compilations()
  fewer = score_rollouts(fewer_subs, tasks, weights, expert=RuleExpert())
  assert compilations() == before
  assert len(fewer.sub_reward) == 5 < len(first.sub_reward) == 6
  np.testing.assert_allclose(fewer.sub_reward, first.sub_reward[1:])


def test_is_correct_and_rule_expert_edge_cases():
  task = rewards_tasks()[0]
  assert is_correct("The Gamma", task) and not is_correct(None, task)
  assert RuleExpert()([ExpertItem(task, "x", None),
                       ExpertItem(task, "x", "Betamax"),
                       ExpertItem(task, "x", "beta!")]) == [0.0, 0.0, 1.0]


def test_bad_inputs_name_the_problem(tok):
  tasks = rewards_tasks()
  with pytest.raises(ValueError, match="needs an expert"):
    score_rollouts([[], []], tasks, reward_weights("with_expert"))
  with pytest.raises(ValueError, match="1 rows of rollouts for 2 tasks"):
    score_rollouts([[]], tasks, reward_weights("mgrpo"))


class YesWhenBeta:
  """Stands in for an engine's `generate`: answers like a judge model."""

  def __init__(self, tok):
    self.tok, self.prompts = tok, []

  def generate(self, prompts, params, key):
    del key
    self.prompts.extend(prompts)
    out = []
    for p in prompts:
      text = "Yes." if "Report: It is Beta" in self.tok.decode(p) else "No"
      ids = self.tok.encode(text)[:params.max_new_tokens]
      out.append(ScriptedResult(ids, np.zeros(len(ids)), "stop", None))
    return out


def test_model_judge_batches_and_reads_yes(tok):
  task = rewards_tasks()[0]
  engine = YesWhenBeta(tok)
  judge = ModelJudge(engine, tok)
  items = [ExpertItem(task, "step 0", "It is Beta."),
           ExpertItem(task, "step 1", None),
           ExpertItem(task, "step 1", "Unknown.")]
  assert judge(items) == [1.0, 0.0, 0.0]
  assert len(engine.prompts) == 2  # No report: not asked.
  assert "Reference answer to the question: Gamma" in tok.decode(
      engine.prompts[0])


def test_model_judge_runs_on_the_real_engine(tok):
  from mgrpo_jax.models import build
  from mgrpo_jax.sampling import Engine
  model = build.init_model(tiny_config(max_position_embeddings=512), seed=0)
  engine = Engine(model, max_conversations=2, cache_len=512)
  task = rewards_tasks()[0]
  scores = ModelJudge(engine, tok)([ExpertItem(task, "s", "It is Beta.")] * 3)
  assert len(scores) == 3 and set(scores) <= {0.0, 1.0}
  assert engine.num_free == 2
