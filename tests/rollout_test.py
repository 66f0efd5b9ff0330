"""The rollout controller, driven by a scripted deterministic policy."""

import jax
import numpy as np
import pytest

from agent_test_utils import (PARAMS, ScriptedPolicy, answer, call,
                              delegating_main_script, team)
from model_test_utils import tiny_tokenizer
from mgrpo_jax.agents import prompts
from mgrpo_jax.agents.rollout import (DELEGATE, Agent, Delegation,
                                      RolloutController)
from mgrpo_jax.agents.tools import ToolRegistry, search_and_visit
from mgrpo_jax.data.corpus import Document, LocalCorpus
from mgrpo_jax.data.task import Task
from mgrpo_jax.sampling.sampling_params import SamplingParams

KEY = jax.random.key(0)


@pytest.fixture(scope="module")
def tok():
  return tiny_tokenizer()


@pytest.fixture(scope="module")
def corpus():
  return LocalCorpus([
      Document("d1", "Alpha", "Alpha is a city. It lies on the river Beta."),
      Document("d2", "Beta", "Beta is a river in Gamma."),
      Document("d3", "Gamma", "Gamma is a country."),
  ])


def tasks(*counts):
  return [Task(f"q{i}", f"Please delegate {n} times.", ("x",), "test")
          for i, n in enumerate(counts)]


def check_trajectory(trajectory, policy):
  """Token-by-token: ids equal the sampler's conversation; the mask is 1
  exactly on the ids the sampler generated; log-probs only there."""
  matching = [c for c, toks in policy.finished.items()
              if toks == trajectory.tokens.tolist()]
  assert matching  # (identical rollouts may match several conversations)
  conv = matching[0]
  generated = [i for turn in policy.generated[conv] for i in turn]
  assert trajectory.tokens[trajectory.loss_mask].tolist() == generated
  # The generated stretches sit exactly where each turn was written.
  position, expected = trajectory.prompt_len, np.zeros_like(
      trajectory.loss_mask)
  for turn_ids in policy.generated[conv]:
    tokens = trajectory.tokens.tolist()
    while tokens[position:position + len(turn_ids)] != turn_ids:
      position += 1
    expected[position:position + len(turn_ids)] = True
    position += len(turn_ids)
  np.testing.assert_array_equal(trajectory.loss_mask, expected)
  assert not trajectory.loss_mask[:trajectory.prompt_len].any()
  assert np.all(trajectory.logprobs[~trajectory.loss_mask] == 0)
  assert np.all(trajectory.logprobs[trajectory.loss_mask] < 0)
  return conv


@pytest.mark.parametrize("counts", [(0, 1, 2, 3)])
def test_delegation_counts_links_and_masks(tok, corpus, counts):
  controller, main_policy, sub_policy = team(tok, corpus)
  rollouts = controller.run(tasks(*counts), group_size=2, key=KEY)
  assert len(rollouts) == len(counts)
  for b, n in enumerate(counts):
    assert len(rollouts[b]) == 2
    for k, rollout in enumerate(rollouts[b]):
      main = rollout.main
      assert (main.task_id, main.question_index, main.rollout_index,
              main.sub_index) == (f"q{b}", b, k, -1)
      assert main.answer == f"final after {n}" and main.format_ok
      assert len(rollout.subs) == n
      for i, sub in enumerate(rollout.subs):
        assert (sub.question_index, sub.rollout_index, sub.sub_index) == (
            b, k, i)
        assert sub.instruction == f"part {i}"
        assert sub.answer == f"report on part {i}" and sub.format_ok
        assert [t.kind for t in sub.turns] == ["tool_call", "answer"]
        assert "Alpha" in sub.turns[0].result  # Real BM25 results.
        check_trajectory(sub, sub_policy)
      # The main agent saw each report as the delegate tool's result.
      reports = [t.result for t in main.turns if t.tool == "delegate"]
      assert reports == [prompts.tool_result("delegate", f"report on part {i}")
                         for i in range(n)]
      assert [t.sub_index for t in main.turns if t.tool] == list(range(n))
      check_trajectory(main, main_policy)
  json = rollouts[3][0].to_json()
  assert json["turns"][0]["sub_agent"]["answer"] == "report on part 0"


def test_each_agent_batches_its_live_conversations(tok, corpus):
  controller, main_policy, sub_policy = team(tok, corpus)
  controller.run(tasks(2, 2, 2, 2), group_size=2, key=KEY)
  # 8 main conversations live together: every main call is one batch of 8.
  assert main_policy.batch_sizes == [8] * 3
  assert sub_policy.batch_sizes == [8] * 4  # 2 delegations x 2 turns.
  assert controller.calls == {"main": 3, "sub": 4}


def test_continuous_refill_with_few_rows(tok, corpus):
  controller, main_policy, sub_policy = team(tok, corpus, rows=3)
  rollouts = controller.run(tasks(0, 1, 2, 3, 1), group_size=2, key=KEY)
  assert [len(r.subs) for row in rollouts for r in row] == [0, 0, 1, 1, 2, 2,
                                                            3, 3, 1, 1]
  assert main_policy.max_live == 3 and sub_policy.max_live == 3
  assert not main_policy.conversations and not sub_policy.conversations


def test_agents_sharing_one_sampler_cannot_deadlock(tok, corpus):
  controller, policy, _ = team(tok, corpus, rows=2, shared=True)
  assert controller.quota == {"main": 1, "sub": 1}
  rollouts = controller.run(tasks(2, 1), group_size=2, key=KEY)
  assert [len(r.subs) for row in rollouts for r in row] == [2, 2, 1, 1]
  assert all(r.main.format_ok for row in rollouts for r in row)


def test_malformed_calls_become_error_messages(tok, corpus):
  bad = ['<tool_call>{"name": "delegate", "arguments": {"task": </tool_call>',
         call("search", query="x"),  # Not a main-agent tool.
         call("delegate"),  # Missing argument.
         "I will just think out loud.",
         answer("fine")]
  controller, main_policy, _ = team(tok, corpus,
                                    main_script=lambda text, t: bad[t])
  [[rollout]] = controller.run(tasks(0), group_size=1, key=KEY)
  main = rollout.main
  assert [t.kind for t in main.turns] == ["error"] * 4 + ["answer"]
  results = [t.result for t in main.turns[:4]]
  assert "not valid JSON" in results[0]
  assert "unknown tool 'search'" in results[1]
  assert "needs the arguments ['task']" in results[2]
  assert all(r.startswith("Format error:") for r in results)
  assert main.answer == "fine" and not main.format_ok  # Strict format.
  assert not rollout.subs
  check_trajectory(main, main_policy)
  controller, *_ = team(tok, corpus, main_script=lambda text, t: bad[t],
                        strict=False)
  [[rollout]] = controller.run(tasks(0), group_size=1, key=KEY)
  assert rollout.main.format_ok


def test_turn_limit_answer_now_and_a_sub_that_never_reports(tok, corpus):
  never = lambda text, turn: call("search", query=f"alpha {turn}")
  controller, _, sub_policy = team(tok, corpus, sub_script=never,
                                   sub_turns=3)
  [[rollout]] = controller.run(tasks(1), group_size=1, key=KEY)
  [sub] = rollout.subs
  assert len(sub.turns) == 3 and sub.finish == "turn_limit"
  assert sub.answer is None and not sub.format_ok
  assert [t.answer_now for t in sub.turns[:2]] == [False, True]
  assert prompts.ANSWER_NOW in sub.turns[1].result
  assert "stopped without a report (turn limit)" in rollout.main.turns[0].result
  assert rollout.main.format_ok  # The main agent itself kept the protocol.
  check_trajectory(sub, sub_policy)


def test_a_model_that_never_stops_ends_by_its_budgets(tok, corpus):
  babble = lambda text, turn: "la " * 500
  controller, main_policy, _ = team(tok, corpus, main_script=babble,
                                    main_turns=3, cache_len=1024)
  [[rollout]] = controller.run(tasks(0), group_size=1, key=KEY)
  main = rollout.main
  assert main.finish in ("turn_limit", "context_limit")
  assert not main.format_ok and main.answer is None
  assert all(t.num_tokens <= PARAMS.max_new_tokens for t in main.turns)
  assert len(main.tokens) <= 1024
  check_trajectory(main, main_policy)


def test_context_budget_cuts_tool_output_then_ends(tok):
  long_page = LocalCorpus([Document("p", "Page", "word " * 3000)])
  reader = lambda text, turn: call("visit", page="p", goal="word")
  controller, _, sub_policy = team(tok, long_page, sub_script=reader,
                                   sub_turns=50, cache_len=1200)
  [[rollout]] = controller.run(tasks(1), group_size=1, key=KEY)
  [sub] = rollout.subs
  assert sub.finish == "context_limit" and not sub.format_ok
  assert len(sub.tokens) <= 1200
  cut = [t for t in sub.turns if t.result and "[cut]" in t.result]
  assert cut and all(t.answer_now for t in cut)
  check_trajectory(sub, sub_policy)


def test_single_agent_mode_searches_itself(tok, corpus):
  def single(text, turn):
    return [call("search", query="Beta river"),
            call("visit", page="d2", goal="country"), answer("Gamma")][turn]
  policy = ScriptedPolicy(tok, single)
  agent = Agent("single", policy, tok, prompts.SINGLE_ROLE, PARAMS,
                tools=ToolRegistry(search_and_visit(corpus)))
  [[rollout]] = RolloutController(agent).run(tasks(0), 1, KEY)
  assert rollout.main.answer == "Gamma" and not rollout.subs
  assert "Beta is a river in Gamma." in rollout.main.turns[1].result
  assert "delegate" not in agent.system_prompt()
  check_trajectory(rollout.main, policy)


def test_a_prompt_longer_than_the_context_budget(tok, corpus):
  controller, *_ = team(tok, corpus, cache_len=300)
  [[rollout]] = controller.run(tasks(1), group_size=1, key=KEY)
  assert rollout.main.finish == "context_limit" and not rollout.main.turns


def test_first_turn_prefix_starts_the_protocol(tok, corpus):
  prefix = '<tool_call>{"name": "delegate", "arguments": {"task": "'
  def completes(text, turn):
    assert text.endswith(prefix) == (turn == 0)
    return 'part 0"}}</tool_call>' if turn == 0 else answer("done")
  controller, main_policy, _ = team(tok, corpus, main_script=completes)
  controller.main.first_turn_prefix = prefix
  [[rollout]] = controller.run(tasks(0), group_size=1, key=KEY)
  main = rollout.main
  assert main.turns[0].text.startswith(prefix) and main.turns[0].format_ok
  assert [s.instruction for s in rollout.subs] == ["part 0"]
  assert tok.decode(main.tokens[:main.prompt_len]).endswith(prefix)
  assert main.answer == "done" and main.format_ok
  check_trajectory(main, main_policy)


def test_bad_team_configurations(tok, corpus):
  policy = ScriptedPolicy(tok, delegating_main_script, max_conversations=1)
  main = Agent("main", policy, tok, "r", PARAMS,
               delegations=[Delegation(DELEGATE, "sub")])
  with pytest.raises(ValueError, match="delegates to 'sub'"):
    RolloutController(main)
  sub = Agent("sub", policy, tok, "r", PARAMS)
  with pytest.raises(ValueError, match="max_conversations=1 shared by 2"):
    RolloutController(main, [sub])
  with pytest.raises(ValueError, match="max_turns=0"):
    Agent("x", policy, tok, "r", PARAMS, max_turns=0)
  with pytest.raises(ValueError, match="answer_reserve=1500"):
    Agent("x", policy, tok, "r", PARAMS, answer_reserve=1500)
  with pytest.raises(ValueError, match="group_size=0"):
    RolloutController(Agent("m", policy, tok, "r", PARAMS)).run(
        tasks(0), 0, KEY)


def test_with_the_real_engine_on_a_random_model(tok, corpus):
  """A random tiny decoder never keeps the protocol: budgets end every
  conversation, and each trajectory is the engine's own tokens."""
  from mgrpo_jax.models import build
  from model_test_utils import tiny_config
  from mgrpo_jax.sampling import Engine
  model = build.init_model(tiny_config(max_position_embeddings=1024), seed=0)
  sampling = SamplingParams(temperature=1.0, max_new_tokens=24)
  main_engine = Engine(model, max_conversations=4, cache_len=1024,
                       chunk_steps=8)
  sub_engine = Engine(model, max_conversations=4, cache_len=1024,
                      chunk_steps=8)
  main = Agent("main", main_engine, tok, prompts.MAIN_ROLE, sampling,
               delegations=[Delegation(DELEGATE, "sub")], max_turns=3)
  sub = Agent("sub", sub_engine, tok, prompts.SUB_ROLE, sampling,
              tools=ToolRegistry(search_and_visit(corpus)), max_turns=2)
  done = []
  rollouts = RolloutController(main, [sub]).run(
      tasks(0, 0, 0), group_size=2, key=KEY, on_rollout=done.append)
  assert len(done) == 6 and main_engine.num_free == 4
  for rollout in (r for row in rollouts for r in row):
    main = rollout.main
    assert main.finish in ("turn_limit", "context_limit", "answer")
    assert main.num_generated == sum(t.num_tokens for t in main.turns)
    assert 0 < main.num_generated <= 3 * 24
    assert np.all(main.logprobs[main.loss_mask] < 0)
    assert np.all(main.logprobs[~main.loss_mask] == 0)


def test_branches_attempt_each_delegation_from_the_same_state(tok, corpus):
  # Each attempt reports a number of its own: the main agent must have
  # continued with attempt 0's, after all attempts of the delegation ended.
  reports = iter(range(1000))

  def numbered_sub(text, turn):
    if turn == 0:
      return call("search", query="alpha")
    return answer(f"report {next(reports)}")

  controller, _, sub_policy = team(tok, corpus, sub_script=numbered_sub)
  controller.branches = 3
  rollouts = controller.run(tasks(2, 0), group_size=2, key=KEY)
  for rollout in rollouts[0]:
    subs = rollout.subs
    assert [(s.sub_index, s.branch) for s in subs] == [
        (0, 0), (1, 1), (2, 2), (3, 0), (4, 1), (5, 2)]
    assert [s.instruction for s in subs] == ["part 0"] * 3 + ["part 1"] * 3
    seen = [t.result for t in rollout.main.turns if t.tool == "delegate"]
    assert seen == [prompts.tool_result("delegate", subs[i].answer)
                    for i in (0, 3)]
    assert [t.sub_index for t in rollout.main.turns if t.tool] == [0, 3]
    for sub in subs:  # The attempts start from the same prompt.
      first = subs[sub.sub_index - sub.branch]
      assert sub.tokens[:sub.prompt_len].tolist() == (
          first.tokens[:first.prompt_len].tolist())
  assert len({s.answer for r in rollouts[0] for s in r.subs}) == 12
  assert rollouts[1][0].subs == []
  with pytest.raises(ValueError, match="branches=0"):
    RolloutController(controller.main, [controller.agents["sub"]], branches=0)
