"""Gold demonstrations (config.sft.demonstrations='gold'): the oracle plays
any data from what its records carry: MuSiQue's decomposition and
supporting paragraphs, HotpotQA's supporting facts."""

import json

import ml_collections
import pytest

from mgrpo_jax.agents import demonstrations, protocol
from mgrpo_jax.agents import tiny_team as tiny
from mgrpo_jax.agents.oracle import Knowledge, gold_steps
from mgrpo_jax.agents.rewards import is_correct
from mgrpo_jax.agents.team import agents_config
from mgrpo_jax.data.loading import load_tasks
from mgrpo_jax.data.records import DataError
from mgrpo_jax.models import tiny as tiny_model
from mgrpo_jax.train.warm_start import check_demonstrations

MUSIQUE = [{
    "id": "2hop_1", "question": "Who is the partner of the performer of Green?",
    "answer": "Miquette Giraudy", "answer_aliases": ["Giraudy"],
    "answerable": True,
    "paragraphs": [
        {"idx": 0, "title": "Green (Steve Hillage album)",
         "paragraph_text": "Green is the fourth studio album by the British "
         "musician Steve Hillage. It was released in 1978.",
         "is_supporting": True},
        {"idx": 1, "title": "Green (colour)",
         "paragraph_text": "Green is the colour between cyan and yellow on "
         "the visible spectrum.", "is_supporting": False},
        {"idx": 2, "title": "Miquette Giraudy",
         "paragraph_text": "Miquette Giraudy is a French keyboard player. "
         "Her partner is Steve Hillage, with whom she formed System 7.",
         "is_supporting": True}],
    "question_decomposition": [
        {"id": 1, "question": "Who is the performer of Green?",
         "answer": "Steve Hillage", "paragraph_support_idx": 0},
        {"id": 2, "question": "Who is the partner of #1?",
         "answer": "Miquette Giraudy", "paragraph_support_idx": 2}]}]

HOTPOTQA = [{
    "_id": "5a7a06935542990198eaf050",
    "question": "Which magazine was started first, Arthur's Magazine or "
                "First for Women?",
    "answer": "Arthur's Magazine", "type": "comparison", "level": "medium",
    "supporting_facts": [["Arthur's Magazine", 0], ["First for Women", 0]],
    "context": [
        ["Radio City (Indian radio station)",
         ["Radio City is India's first private FM radio station."]],
        ["Arthur's Magazine",
         ["Arthur's Magazine (1844-1846) was an American literary periodical "
          "published in Philadelphia."]],
        ["First for Women",
         ["First for Women is a woman's magazine published in the USA.",
          " The magazine was started in 1989."]]]}]


def _write(path, records, lines=True):
  path.write_text("".join(json.dumps(r) + "\n" for r in records) if lines
                  else json.dumps(records), encoding="utf-8")
  return path


def _tokenizer(*tasksets):
  texts = [t for ts in tasksets
           for t in tiny.data_texts(ts.documents, ts.tasks)]
  return tiny_model.train_tokenizer(texts + tiny.protocol_texts() * 20, 1024)


def _agents():
  config = agents_config()
  config.search_k = 3
  config.prompt_style = "brief"
  return config


def test_musique_decomposition_is_played_step_by_step(tmp_path):
  taskset = load_tasks(_write(tmp_path / "musique.jsonl", MUSIQUE))
  task = taskset.tasks[0]
  assert [s.doc_id for s in task.sub_questions] == [
      d.doc_id for d in taskset.documents if "Green (S" in d.title
      or "Miquette" in d.title]
  knowledge = Knowledge(taskset, gold=True)
  [[rollout]] = demonstrations.oracle_rollouts(
      taskset, _tokenizer(taskset), agents=_agents(), knowledge=knowledge)
  assert rollout.main.format_ok and is_correct(rollout.main.answer, task)
  assert [s.instruction for s in rollout.subs] == [
      "Who is the performer of Green?", "Who is the partner of Steve Hillage?"]
  for sub, step in zip(rollout.subs, task.sub_questions):
    search = next(t for t in sub.turns if t.tool == "search")
    assert search.arguments["query"] == step.question  # What it was given.
    visit = next(t for t in sub.turns if t.tool == "visit")
    assert visit.arguments["page"] == step.doc_id  # The supporting page.
    assert protocol.report_answer(sub.answer) == step.answer
  assert knowledge.misses == 0


def test_a_search_that_misses_the_page_reports_unknown(tmp_path):
  taskset = load_tasks(_write(tmp_path / "musique.jsonl", MUSIQUE))
  knowledge = Knowledge(taskset, gold=True)
  agents = _agents()
  agents.search_k = 1  # "performer of Green?" ranks the colour page first.
  [[rollout]] = demonstrations.oracle_rollouts(
      taskset, _tokenizer(taskset), agents=agents, knowledge=knowledge)
  assert knowledge.misses >= 1
  assert protocol.report_answer(rollout.subs[0].answer) == "unknown"


def test_hotpotqa_delegates_the_question_to_a_supporting_page(tmp_path):
  taskset = load_tasks(_write(tmp_path / "hotpot.json", HOTPOTQA,
                              lines=False))
  task = taskset.tasks[0]
  pages = {d.doc_id: d for d in taskset.documents}
  [step] = gold_steps(task, {k: d.text for k, d in pages.items()})
  # The supporting page that states the answer, not the other one.
  assert pages[step.doc_id].title == "Arthur's Magazine"
  [[rollout]] = demonstrations.oracle_rollouts(
      taskset, _tokenizer(taskset), agents=_agents(),
      knowledge=Knowledge(taskset, gold=True))
  assert [s.instruction for s in rollout.subs] == [task.question]
  assert rollout.main.format_ok and is_correct(rollout.main.answer, task)


def test_records_without_what_the_demonstrations_need_are_refused(tmp_path):
  plain = load_tasks(_write(tmp_path / "qa.jsonl", [
      {"id": "q1", "question": "Who wrote X?", "answer": "Ann"}]))
  config = ml_collections.ConfigDict({
      "sft": {"steps": 5, "questions": 10, "demonstrations": "gold"},
      "model": {"name": "tiny"},
      "data": {"train": "qa.jsonl"}})
  with pytest.raises(DataError, match="config.data.train='qa.jsonl': task "
                     "'q1' \\(qa\\) has no question_decomposition and no "
                     "supporting_facts"):
    check_demonstrations(config, plain.tasks, ())
  config.sft.demonstrations = "oracle"
  with pytest.raises(DataError, match="task 'q1' has no "
                     "question_decomposition.*expected 'gold'"):
    check_demonstrations(config, plain.tasks, ())
  config.sft.steps = 0  # No warm start: nothing to demonstrate.
  check_demonstrations(config, plain.tasks, ())
