"""Per-agent diagnostics, on oracle rollouts whose behaviour is known."""

import pytest

from mgrpo_jax.models import tiny as tiny_model
from mgrpo_jax.agents import demonstrations
from mgrpo_jax.agents.team import agents_config
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.agents import tiny_team as tiny
from mgrpo_jax.agents.diagnostics import Grader, team_diagnostics

WORLD = WorldConfig(num_entities=40, train_questions=16, validation_questions=2,
                    test_questions=2, max_hops=2)


@pytest.fixture(scope="module")
def taskset():
  return generate_world(WORLD).task_set("train")


@pytest.fixture(scope="module")
def tok():
  return tiny_model.train_tokenizer(tiny.tokenizer_texts(generate_world(WORLD)),
                              1024)


def figures(taskset, tok, **kwargs):
  config = agents_config()
  config.snippet_chars = 60
  rows = demonstrations.oracle_rollouts(taskset, tok, agents=config, seed=3,
                                context_tokens=2048, **kwargs)
  return team_diagnostics(rows, taskset.tasks, Grader(taskset.documents))


def test_a_perfect_team(taskset, tok):
  out = figures(taskset, tok)
  assert out["sub_report_accuracy"] == 1.0 and out["sub_gradeable"] == 1.0
  assert out["sub_visit_rate"] == 1.0 and out["sub_read_accuracy"] == 1.0
  assert out["sub_searches_per_report"] == 1.0
  assert out["visits_per_hop"] == 1.0
  assert out["main_delegations_hop1"] == 1.0
  assert out["main_delegations_hop2"] == 2.0
  assert out["main_early_answer"] == 0.0 and out["sub_wrong_page"] == 0.0


def test_each_weakness_shows_in_its_own_agent(taskset, tok):
  lazy = figures(taskset, tok, lazy_report=1.0)
  assert lazy["sub_visit_rate"] == 0.0 and lazy["visits_per_hop"] == 0.0
  assert "sub_read_accuracy" not in lazy  # No report came from a page.
  assert lazy["sub_report_accuracy"] < 0.5  # Only what snippets state.
  assert lazy["main_delegations_hop2"] == 2.0  # The planner is unchanged.
  early = figures(taskset, tok, early_answer=1.0)
  assert early["main_delegations_hop2"] == 1.0
  assert early["main_early_answer"] == 1.0
  assert early["main_delegations_hop1"] == 1.0
  assert early["sub_report_accuracy"] == 1.0  # The sub-agent is unchanged.
  assert early["sub_visit_rate"] == 1.0


def test_wrong_reports_and_ungradeable_tasks(taskset):
  grader = Grader(taskset.documents)
  step = taskset.tasks[0].sub_questions[0]
  assert grader.answer(step.question) == step.answer
  assert grader.report_correct(step.question, f"{step.answer}. Evidence: x")
  assert grader.report_correct(step.question, step.answer.upper() + ".")
  assert grader.report_correct(step.question, "Somebody Else") is False
  assert grader.report_correct(step.question, None) is False
  assert grader.report_correct("What is love?", "x") is None
  assert grader.report_correct("Who founded Nobody Known?", "x") is None


def test_single_agent_has_no_sub_figures(taskset, tok):
  config = agents_config()
  config.layout = "single"
  config.main.max_turns = 5
  rows = demonstrations.oracle_rollouts(taskset, tok, agents=config,
                                context_tokens=2048)
  out = team_diagnostics(rows, taskset.tasks, Grader(taskset.documents))
  assert out["visits_per_hop"] == 1.0
  assert out["main_delegations_hop2"] == 0.0
  assert not any(k.startswith("sub_") for k in out)


def test_rows_and_tasks_must_match(taskset):
  with pytest.raises(ValueError, match="one row per task"):
    team_diagnostics([[]], taskset.tasks, Grader(taskset.documents))


def test_a_visit_to_a_distractor_page_is_counted(taskset, tok):
  rows = demonstrations.oracle_rollouts(
      taskset, tok, agents=agents_config(), seed=3, context_tokens=2048)
  grader = Grader(taskset.documents)
  # Send every visit of the first question's sub-agents to another page.
  wrong = next(d.doc_id for d in taskset.documents
               if d.doc_id != grader.page_id(
                   rows[0][0].subs[0].instruction))
  for sub in rows[0][0].subs:
    for turn in sub.turns:
      if turn.tool == "visit":
        turn.arguments = {**turn.arguments, "page": wrong}
  out = team_diagnostics(rows, taskset.tasks, grader)
  subs = sum(len(r.subs) for row in rows for r in row)
  assert out["sub_wrong_page"] == pytest.approx(len(rows[0][0].subs) / subs)
