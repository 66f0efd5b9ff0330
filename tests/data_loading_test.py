"""load_tasks picks the synthetic world or a file's reader (detected or
forced); load_corpus reads {"id", "title", "text"} pages."""

import base64
import csv
import json

import pytest

from mgrpo_jax.data.loading import (FORMATS, detect_format, load_corpus,
                                    load_tasks)
from mgrpo_jax.data.readers import DataError, xor_text
from mgrpo_jax.data.world import WorldConfig, generate_world

SMALL = WorldConfig(num_entities=30, train_questions=8,
                    validation_questions=4, test_questions=6, seed=11)

RECORDS = {
    "gaia": {"task_id": "t1", "Question": "Q?", "Level": 1,
             "Final answer": "A", "file_name": ""},
    "webwalkerqa": {"question": "Q?", "answer": "A",
                    "root_url": "https://example.org",
                    "info": {"difficulty_level": "hard"}},
    "hotpotqa": {"_id": "h1", "question": "Q?", "answer": "A",
                 "type": "bridge", "level": "easy",
                 "supporting_facts": [["T", 0]],
                 "context": [["T", ["A is here."]]]},
    "musique": {"id": "m1", "question": "Q?", "answer": "A",
                "paragraphs": [{"idx": 0, "title": "T",
                                "paragraph_text": "A is here.",
                                "is_supporting": True}],
                "question_decomposition": [{"id": 1, "question": "Q?",
                                            "answer": "A"}]},
}


def write_jsonl(path, records):
  path.write_text("".join(json.dumps(r) + "\n" for r in records),
                  encoding="utf-8")
  return path


def write_xbench(path):
  def enc(text):
    return base64.b64encode(xor_text(text.encode(), "key")).decode()

  with open(path, "w", encoding="utf-8-sig", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["id", "prompt", "answer", "reference_steps", "canary"])
    writer.writerow(["7", enc("Q?"), enc("A"), "", "key"])
  return path


@pytest.fixture
def files(tmp_path):
  paths = {name: write_jsonl(tmp_path / f"{name}.jsonl", [record])
           for name, record in RECORDS.items()}
  hotpot_list = tmp_path / "hotpot.json"
  hotpot_list.write_text(json.dumps([RECORDS["hotpotqa"]]), encoding="utf-8")
  paths["hotpotqa_list"] = hotpot_list
  paths["xbench"] = write_xbench(tmp_path / "DeepSearch.csv")
  return paths


def test_formats_are_detected(files):
  for name, path in files.items():
    assert detect_format(path) == name.removesuffix("_list")
    tasks = load_tasks(path)
    assert tasks.tasks[0].source == name.removesuffix("_list")
    assert tasks.tasks[0].answer == "A"
  assert load_tasks(str(files["musique"])).tasks[0].task_id == "m1"


def test_format_overrides_detection(files, tmp_path):
  odd = write_jsonl(tmp_path / "odd.jsonl",
                    [{**RECORDS["webwalkerqa"], "task_id": "x",
                      "Question": "Also?"}])
  assert detect_format(odd) == "gaia"
  assert load_tasks(odd, format="webwalkerqa").tasks[0].question == "Q?"
  with pytest.raises(DataError, match="format='squad'; expected one of "
                     "gaia, webwalkerqa, xbench, hotpotqa, musique"):
    load_tasks(files["gaia"], format="squad")


def test_unknown_formats_list_the_known_ones(tmp_path):
  path = write_jsonl(tmp_path / "other.jsonl", [{"q": "Q?", "a": "A"}])
  with pytest.raises(DataError, match=r"line 1: cannot tell the format from "
                     r"the first record's keys \['a', 'q'\]; expected a known "
                     r"format \(gaia, webwalkerqa, xbench, hotpotqa, musique"):
    load_tasks(path)
  csv_path = tmp_path / "other.csv"
  csv_path.write_text("id,prompt,answer\n", encoding="utf-8")
  with pytest.raises(DataError, match="cannot tell the format from the CSV"):
    load_tasks(csv_path)
  with pytest.raises(DataError, match="nowhere.jsonl: no such file; expected "
                     "a path to a benchmark file"):
    load_tasks(tmp_path / "nowhere.jsonl")
  assert FORMATS == ("gaia", "webwalkerqa", "xbench", "hotpotqa", "musique",
                     "qa")


def test_plain_question_answer_records_are_detected_and_read(tmp_path):
  path = write_jsonl(tmp_path / "mine.jsonl", [
      {"question": "Who wrote X?", "answer": "Ann"},
      {"id": "q7", "question": "Where is Y?", "answers": ["Rome", "Roma"],
       "hops": 2, "level": "hard"}])
  taskset = load_tasks(path)
  assert taskset.name == "qa:mine.jsonl" and taskset.documents == ()
  first, second = taskset.tasks
  assert (first.task_id, first.answers, first.hops) == ("qa-00000", ("Ann",),
                                                        None)
  assert (second.task_id, second.answers, second.hops, second.level) == (
      "q7", ("Rome", "Roma"), 2, "hard")
  for bad, message in (
      ({"question": "Q?", "answers": []}, "field 'answers' is empty"),
      ({"question": "Q?", "answer": "A", "hops": 0}, "field 'hops' is 0"),
      ({"question": " ", "answer": "A"}, "field 'question' is empty")):
    broken = write_jsonl(tmp_path / "bad.jsonl", [bad])
    with pytest.raises(DataError, match=f"bad.jsonl, line 1: {message}"):
      load_tasks(broken, format="qa")


def test_limit(files):
  path = write_jsonl(files["gaia"], [{**RECORDS["gaia"], "task_id": f"t{i}"}
                                     for i in range(5)])
  assert [t.task_id for t in load_tasks(path, limit=2).tasks] == ["t0", "t1"]
  with pytest.raises(ValueError, match="limit=0; expected a positive"):
    load_tasks(path, limit=0)


def test_synthetic_world(tmp_path):
  world = generate_world(SMALL)
  test = load_tasks("synthetic", data_dir=tmp_path, world=SMALL)
  assert test == world.task_set("test")
  train = load_tasks("synthetic:train", data_dir=tmp_path, world=SMALL,
                     limit=3)
  assert train.tasks == world.splits["train"][:3]
  assert train.documents == world.documents
  assert load_tasks("synthetic", split="validation", data_dir=tmp_path,
                    world=SMALL) == world.task_set("validation")
  with pytest.raises(DataError, match="two different splits"):
    load_tasks("synthetic:train", split="test", data_dir=tmp_path,
               world=SMALL)
  with pytest.raises(DataError, match="split 'dev'; expected one of train, "
                     "validation, test"):
    load_tasks("synthetic:dev", data_dir=tmp_path, world=SMALL)


def test_load_corpus(tmp_path):
  path = write_jsonl(tmp_path / "corpus.jsonl", [
      {"id": "p1", "title": "One", "text": "First page."},
      {"id": "p2", "title": "", "text": "Second page."}])
  docs = load_corpus(path)
  assert [(d.doc_id, d.title, d.text) for d in docs] == [
      ("p1", "One", "First page."), ("p2", "", "Second page.")]


@pytest.mark.parametrize("lines, message", [
    (['{"id": "p1", "title": "T", "text": "x"}',
      '{"id": "p1", "title": "U", "text": "y"}'],
     r"line 2: field 'id' repeats 'p1' \(first at line 1\)"),
    (['{"id": "p1", "text": "x"}'], "line 1: field 'title' is missing"),
    (['{"id": null, "title": "T", "text": "x"}'],
     r"line 1: field 'id' is None \(null\); expected a string"),
    (['{"id": "p1", "title": "T", "text": "x"}', "not json"],
     "line 2: not valid JSON"),
    (["", "  "], "the file is empty"),
])
def test_load_corpus_errors(tmp_path, lines, message):
  path = tmp_path / "corpus.jsonl"
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  with pytest.raises(DataError, match=rf"{path}(, |: ){message}"):
    load_corpus(path)
