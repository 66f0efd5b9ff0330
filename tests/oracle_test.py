"""The oracle policy: perfect (and controllably imperfect) demonstrations
through the real rollout controller."""

import jax
import pytest

from mgrpo_jax.models import tiny as tiny_model
from mgrpo_jax.data import facts
from mgrpo_jax.agents import protocol
from mgrpo_jax.agents import demonstrations
from mgrpo_jax.agents.rewards import is_correct
from mgrpo_jax.agents.team import agents_config
from mgrpo_jax.data.world import RELATIONS, WorldConfig, generate_world
from mgrpo_jax.agents import oracle
from mgrpo_jax.agents import tiny_team as tiny

WORLD = WorldConfig(num_entities=40, train_questions=12, validation_questions=2,
                    test_questions=2, max_hops=3)


@pytest.fixture(scope="module")
def world():
  return generate_world(WORLD)


@pytest.fixture(scope="module")
def taskset(world):
  return world.task_set("train")


@pytest.fixture(scope="module")
def tok(world):
  return tiny_model.train_tokenizer(tiny.tokenizer_texts(world), 1024)


def single_config():
  config = agents_config()
  config.layout = "single"
  config.main.max_turns = 2 * WORLD.max_hops + 1  # search + visit per hop.
  return config


def test_relation_templates_parse_and_read():
  works_for = next(r for r in RELATIONS if r.name == "works_for")
  parsed = facts.parse_step("Which company does Nuko Besho work for?")
  assert parsed == (works_for, "Nuko Besho")
  assert facts.parse_step("What is love?") is None
  page = "Nuko Besho is a person. Nuko Besho works for Pikrus Works. Other."
  assert facts.read_fact(works_for, "Nuko Besho", page) == "Pikrus Works"
  assert facts.read_fact(works_for, "Someone Else", page) is None
  hits = "[w1] Nuko Kaba: text\n[w7] Nuko Besho: Nuko Besho is a person."
  assert oracle.pick_page(hits, "Nuko Besho") == "w7"
  assert oracle.pick_page(hits, "Nobody") == "w1"
  assert oracle.pick_page("No results. Try other words.", "X") is None
  assert protocol.report_answer("Pikrus Works. Evidence: a sentence.") == (
      "Pikrus Works")


def test_perfect_multi_agent_demonstrations(taskset, tok):
  rows = demonstrations.oracle_rollouts(taskset, tok, context_tokens=2048)
  assert len(rows) == len(taskset.tasks)
  for task, [rollout] in zip(taskset.tasks, rows):
    main = rollout.main
    assert main.format_ok and is_correct(main.answer, task), main.to_json()
    assert len(rollout.subs) == task.hops
    for step, doc_id, sub in zip(task.sub_questions,
                                 task.metadata["doc_ids"], rollout.subs):
      assert sub.format_ok and sub.instruction == step.question
      assert protocol.report_answer(sub.answer) == step.answer
      assert step.answer in sub.answer.split(protocol.EVIDENCE)[1]
      visit = next(t for t in sub.turns if t.tool == "visit")
      assert visit.arguments["page"] == doc_id  # The entity's own page.
    for trajectory in (main, *rollout.subs):
      # The loss mask covers exactly the turns the oracle wrote.
      written = tok.decode(trajectory.tokens[trajectory.loss_mask])
      assert written == "".join(t.text for t in trajectory.turns)
      assert not trajectory.loss_mask[:trajectory.prompt_len].any()
      assert all(t.format_ok for t in trajectory.turns)


def test_demonstrations_are_flat_main_then_subs(taskset, tok):
  demos = demonstrations.demonstrations(taskset, tok, context_tokens=2048)
  expected = sum(1 + t.hops for t in taskset.tasks)
  assert len(demos) == expected
  assert demos[0].agent == "main" and demos[1].agent == "sub"
  assert {d.task_id for d in demos} == {t.task_id for t in taskset.tasks}


def test_perfect_single_agent_demonstrations(taskset, tok):
  rows = demonstrations.oracle_rollouts(taskset, tok, agents=single_config())
  for task, [rollout] in zip(taskset.tasks, rows):
    assert rollout.main.agent == "single" and not rollout.subs
    assert rollout.main.format_ok and is_correct(rollout.main.answer, task)
    visits = [t.arguments["page"] for t in rollout.main.turns
              if t.tool == "visit"]
    assert visits == list(task.metadata["doc_ids"][:-1])


@pytest.mark.parametrize("mode", ["multi", "single"])
def test_noise_makes_mistakes_deterministically(taskset, tok, mode):
  def run(seed):
    return demonstrations.oracle_rollouts(taskset, tok, agents=single_config(),
                                  layout=mode, noise=0.4, seed=seed,
                                  group_size=2, context_tokens=2048)

  rows = run(seed=3)
  mains = [(task, r.main) for task, row in zip(taskset.tasks, rows)
           for r in row]
  correct = [is_correct(m.answer, t) for t, m in mains]
  format_ok = [m.format_ok for _, m in mains]
  assert 0 < sum(correct) < len(mains)
  assert 0 < sum(format_ok) < len(mains)
  tokens = lambda rows: [t.tokens.tolist() for row in rows for r in row
                         for t in (r.main, *r.subs)]
  assert tokens(run(seed=3)) == tokens(rows)
  assert tokens(run(seed=4)) != tokens(rows)


def test_policy_counts_its_mistakes(taskset, tok):
  controller = demonstrations.oracle_team(taskset, tok, agents_config(), noise=1.0)
  controller.run(list(taskset.tasks[:4]), 1, jax.random.key(0))
  made = controller.agents["main"].policy.mistakes
  assert set(made) <= set(oracle.MISTAKES) and sum(made.values()) > 0
  sub_made = controller.agents["sub"].policy.mistakes
  assert "malformed" in sub_made


@pytest.mark.parametrize("mode", ["multi", "single"])
def test_early_answer_stops_multi_hop_questions_after_the_first_hop(
    taskset, tok, mode):
  def run(early_answer):
    return demonstrations.oracle_rollouts(taskset, tok, agents=single_config(),
                                  layout=mode, early_answer=early_answer,
                                  seed=1, group_size=2, context_tokens=2048)

  always, never, half = run(1.0), run(0.0), run(0.5)
  hops = lambda r: (len(r.subs) if mode == "multi" else
                    sum(t.tool == "visit" for t in r.main.turns))
  stopped = []
  for task, row_always, row_never, row_half in zip(taskset.tasks, always,
                                                   never, half):
    for r_always, r_never, r_half in zip(row_always, row_never, row_half):
      # Never: every hop, the right answer. Always: one hop, and that
      # hop's answer (an intermediate entity on a multi-hop question).
      assert hops(r_never) == task.hops
      assert is_correct(r_never.main.answer, task)
      assert hops(r_always) == 1 and r_always.main.format_ok
      assert r_always.main.answer == task.sub_questions[0].answer
      assert is_correct(r_always.main.answer, task) == (task.hops == 1)
      if task.hops > 1:
        stopped.append(hops(r_half) == 1)
      else:
        assert hops(r_half) == 1 and is_correct(r_half.main.answer, task)
  assert 0 < sum(stopped) < len(stopped)  # Decided per conversation.
  # No names are changed: every report states its hop's gold answer.
  if mode == "multi":
    for task, row in zip(taskset.tasks, always):
      for r in row:
        assert (protocol.report_answer(r.subs[0].answer)
                == task.sub_questions[0].answer)


@pytest.mark.parametrize("mode", ["multi", "single"])
def test_lazy_report_answers_from_the_search_results_without_visiting(
    taskset, tok, mode):
  def run(lazy_report, snippet_chars=60):
    config = single_config()
    config.snippet_chars = snippet_chars
    return demonstrations.oracle_rollouts(taskset, tok, agents=config,
                                  layout=mode, lazy_report=lazy_report,
                                  seed=1, group_size=2, context_tokens=2048)

  def count(rollout, tool):
    return sum(t.tool == tool for s in [rollout.main, *rollout.subs]
               for t in s.turns)

  gold = {q.question: q.answer for t in taskset.tasks
          for q in t.sub_questions}

  def stated(rows):  # Share of lazy first hops whose answer is not unknown.
    answers = [r.main.answer if mode == "single" and task.hops == 1
               else protocol.report_answer(r.subs[0].answer) if r.subs
               else None for row, task in zip(rows, taskset.tasks)
               for r in row]
    answers = [a for a in answers if a is not None]
    return sum(a != oracle.UNKNOWN for a in answers) / len(answers)

  always, never, half = run(1.0), run(0.0), run(0.5)
  lazy_hops, all_hops = 0, 0
  for task, row_always, row_never, row_half in zip(taskset.tasks, always,
                                                   never, half):
    for r_always, r_never, r_half in zip(row_always, row_never, row_half):
      assert count(r_never, "visit") == task.hops
      assert is_correct(r_never.main.answer, task)
      # Always lazy: a search per hop and no visit; the answer is a fact
      # a snippet states in full, else "unknown" (never a wrong name).
      assert count(r_always, "visit") == 0
      assert count(r_always, "search") >= 1 and r_always.main.format_ok
      for sub in r_always.subs:
        answer = protocol.report_answer(sub.answer)
        assert answer in (oracle.UNKNOWN, gold.get(sub.instruction))
      if task.hops == 1:
        assert r_always.main.answer in (oracle.UNKNOWN,
                                        task.sub_questions[0].answer)
      lazy_hops += task.hops - count(r_half, "visit")
      all_hops += task.hops
  assert 0 < lazy_hops < all_hops  # Decided per hop.
  if mode == "multi":  # Cut-short snippets mostly lack the fact.
    assert stated(always) < 0.5 < stated(run(1.0, snippet_chars=400))


@pytest.mark.parametrize("kwargs, message", [
    ({"plays": "boss"}, r"plays='boss'"),
    ({"plays": "main", "lazy_report": 0.5}, r"plays='main'"),
    ({"plays": "sub", "lazy_report": 2.0}, r"lazy_report=2.0"),
    ({"plays": "main", "noise": 1.5}, r"noise=1.5"),
    ({"plays": "main", "early_answer": -0.1}, r"early_answer=-0.1"),
    ({"plays": "sub", "early_answer": 0.5}, r"plays='sub'"),
])
def test_bad_policy_arguments_are_named(taskset, tok, kwargs, message):
  with pytest.raises(ValueError, match=message):
    oracle.OraclePolicy(tok, oracle.Knowledge(taskset), **kwargs)


def test_unknown_question_and_unsupported_config_are_named(taskset, world, tok):
  other = world.task_set("test")
  controller = demonstrations.oracle_team(taskset, tok, agents_config())
  with pytest.raises(ValueError, match="no task has the question"):
    controller.run(list(other.tasks[:1]), 1, jax.random.key(0))
  config = agents_config()
  config.reason_tool = True
  with pytest.raises(ValueError, match="reason_tool=True is not supported"):
    demonstrations.oracle_team(taskset, tok, config)
  config = agents_config()
  config.sub.first_turn_prefix = "<tool_call>"
  with pytest.raises(ValueError, match="first_turn_prefix"):
    demonstrations.oracle_team(taskset, tok, config)
