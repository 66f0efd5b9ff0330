"""Benchmark readers: small hand-written files in each format read into
TaskSets, and every kind of bad input named by file, line/row and field."""

import base64
import csv
import json

import pytest

from mgrpo_jax.data.readers import (DataError, doc_id_for, read_gaia,
                                    read_hotpotqa, read_musique,
                                    read_webwalkerqa, read_xbench, xor_text)


def write_jsonl(path, records):
  path.write_text("".join(json.dumps(r) + "\n" for r in records),
                  encoding="utf-8")
  return path


def encode(text, canary):
  """What XBench's CSV holds: base64 of the UTF-8 text XOR-ed with canary."""
  return base64.b64encode(xor_text(text.encode("utf-8"), canary)).decode()


def write_xbench(path, rows, *, bom=True):
  with open(path, "w", encoding="utf-8-sig" if bom else "utf-8",
            newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["id", "prompt", "answer", "reference_steps", "canary"])
    writer.writerows(rows)
  return path


def xbench_row(id_, question, answer, steps, canary, key=None):
  key = canary if key is None else key
  return [id_, encode(question, key), encode(answer, key),
          encode(steps, key) if steps else "", canary]


GAIA = [
    {"task_id": "c61d22de", "Question": "How many studio albums?",
     "Level": 1, "Final answer": "3", "file_name": "",
     "Annotator Metadata": {"Steps": "1. Search.", "Number of steps": "1",
                            "Tools": "1. Web browser"}},
    {"task_id": "32102e3e", "Question": "What is in the attached sheet?",
     "Level": "2", "Final answer": "Kale", "file_name": "32102e3e.xlsx"},
]

WEBWALKER = [
    {"question": "When is the deadline?", "answer": "May 1",
     "root_url": "https://conf.example.org",
     "info": {"type": "single_source", "difficulty_level": "easy",
              "lang": "en", "domain": "conference",
              "source_website": ["https://conf.example.org/dates"]}},
    {"question": "Who chairs it?", "answer": "Ada",
     "root_url": "https://conf.example.org"},
]

HOTPOT = [
    {"_id": "5a8b57f2", "question": "Which magazine was started first?",
     "answer": "Arthur's Magazine", "type": "comparison", "level": "medium",
     "supporting_facts": [["Arthur's Magazine", 0], ["First for Women", 0]],
     "context": [["Arthur's Magazine", ["Arthur's Magazine was a monthly.",
                                        " It began in 1844."]],
                 ["First for Women", ["First for Women began in 1989."]]]},
    {"_id": "5a8c7595", "question": "Where was the 1844 magazine printed?",
     "answer": "Philadelphia", "type": "bridge", "level": "hard",
     "supporting_facts": [["Arthur's Magazine", 1]],
     "context": [["Arthur's Magazine", ["Arthur's Magazine was a monthly.",
                                        " It began in 1844."]],
                 ["Philadelphia", ["Philadelphia is a city."]]]},
]

MUSIQUE = [
    {"id": "2hop__1_2", "question": "Who is the spouse of the Green "
     "performer?", "answer": "Miquette Giraudy",
     "answer_aliases": ["Miquette"], "answerable": True,
     "paragraphs": [
         {"idx": 0, "title": "Green", "paragraph_text": "Green is an album "
          "by Steve Hillage.", "is_supporting": True},
         {"idx": 1, "title": "Steve Hillage", "paragraph_text": "Hillage's "
          "partner is Miquette Giraudy.", "is_supporting": True},
         {"idx": 2, "title": "Green", "paragraph_text": "Green is a colour.",
          "is_supporting": False}],
     "question_decomposition": [
         {"id": 1, "question": "Green >> performer",
          "answer": "Steve Hillage", "paragraph_support_idx": 0},
         {"id": 2, "question": "Who is the spouse of #1?",
          "answer": "Miquette Giraudy", "paragraph_support_idx": 1}]},
]


def test_gaia(tmp_path):
  tasks = read_gaia(write_jsonl(tmp_path / "metadata.jsonl", GAIA))
  first, second = tasks.tasks
  assert tasks.name == "gaia:metadata.jsonl" and tasks.documents == ()
  assert (first.task_id, first.question, first.answers, first.level) == (
      "c61d22de", "How many studio albums?", ("3",), "1")
  assert first.source == "gaia" and "file_name" not in first.metadata
  assert first.metadata["annotator"]["Number of steps"] == "1"
  assert second.level == "2"
  assert second.metadata["file_name"] == "32102e3e.xlsx"
  assert second.metadata["file_path"] == str(tmp_path / "32102e3e.xlsx")


def test_webwalkerqa_jsonl_and_json_list(tmp_path):
  from_lines = read_webwalkerqa(write_jsonl(tmp_path / "w.jsonl", WEBWALKER))
  list_file = tmp_path / "w.json"
  list_file.write_text(json.dumps(WEBWALKER, indent=2), encoding="utf-8")
  from_list = read_webwalkerqa(list_file)
  assert from_lines.tasks == from_list.tasks
  first, second = from_lines.tasks
  assert first.task_id == "webwalkerqa-00000" and first.level == "easy"
  assert first.metadata["root_url"] == "https://conf.example.org"
  assert first.metadata["info"]["domain"] == "conference"
  assert second.level == "" and "info" not in second.metadata


def test_xbench_decrypts_with_the_canary(tmp_path):
  canary = "BENCHMARK DATA SHOULD NEVER APPEAR. canary GUID 1f2e"
  path = write_xbench(tmp_path / "DeepSearch.csv", [
      xbench_row("1", "哪一年成立？", "1998年", "1. 搜索\n2. 阅读", canary),
      xbench_row("2", "Which river?", "Nile", "", canary)])
  first, second = read_xbench(path).tasks
  assert (first.task_id, first.question, first.answer) == (
      "xbench-1", "哪一年成立？", "1998年")
  assert first.metadata["reference_steps"] == "1. 搜索\n2. 阅读"
  assert second.answer == "Nile" and second.metadata == {}
  no_bom = write_xbench(tmp_path / "plain.csv",
                        [xbench_row("1", "Q?", "A", "", canary)], bom=False)
  assert read_xbench(no_bom).tasks[0].question == "Q?"


def test_hotpotqa_paragraphs_become_the_corpus(tmp_path):
  path = tmp_path / "hotpot_dev.json"
  path.write_text(json.dumps(HOTPOT), encoding="utf-8")
  tasks = read_hotpotqa(path)
  from_lines = read_hotpotqa(write_jsonl(tmp_path / "h.jsonl", HOTPOT))
  assert (tasks.tasks, tasks.documents) == (from_lines.tasks,
                                            from_lines.documents)
  titles = [d.title for d in tasks.documents]
  assert titles == ["Arthur's Magazine", "First for Women", "Philadelphia"]
  arthur = tasks.documents[0]
  assert arthur.doc_id == doc_id_for("hp", "Arthur's Magazine")
  assert arthur.text == "Arthur's Magazine was a monthly. It began in 1844."
  first = tasks.tasks[0]
  assert (first.task_id, first.answer, first.level, first.hops) == (
      "5a8b57f2", "Arthur's Magazine", "medium", 2)
  assert first.metadata["type"] == "comparison"
  assert first.metadata["supporting_doc_ids"] == (
      arthur.doc_id, tasks.documents[1].doc_id)


def test_musique_substitutes_earlier_answers(tmp_path):
  tasks = read_musique(write_jsonl(tmp_path / "musique.jsonl", MUSIQUE))
  (task,) = tasks.tasks
  assert task.answers == ("Miquette Giraudy", "Miquette")
  assert (task.hops, task.level) == (2, "2-hop")
  assert [s.question for s in task.sub_questions] == [
      "Green >> performer", "Who is the spouse of Steve Hillage?"]
  assert [s.answer for s in task.sub_questions] == [
      "Steve Hillage", "Miquette Giraudy"]
  assert [d.title for d in tasks.documents] == ["Green", "Steve Hillage",
                                                "Green"]
  assert len({d.doc_id for d in tasks.documents}) == 3
  assert task.metadata["supporting_doc_ids"] == tuple(
      d.doc_id for d in tasks.documents[:2])
  assert task.metadata["answerable"] is True


def test_limit_keeps_the_first_records_and_their_paragraphs(tmp_path):
  path = write_jsonl(tmp_path / "h.jsonl", HOTPOT)
  tasks = read_hotpotqa(path, limit=1)
  assert [t.task_id for t in tasks.tasks] == ["5a8b57f2"]
  assert "Philadelphia" not in [d.title for d in tasks.documents]
  with pytest.raises(ValueError, match="limit=0: expected a positive"):
    read_hotpotqa(path, limit=0)


READERS = {"gaia": (read_gaia, GAIA), "webwalkerqa": (read_webwalkerqa,
                                                      WEBWALKER),
           "hotpotqa": (read_hotpotqa, HOTPOT),
           "musique": (read_musique, MUSIQUE)}


def _without(record, field):
  return {k: v for k, v in record.items() if k != field}


def _with(record, **fields):
  return {**record, **fields}


# (reader, records written as the file's lines 1.., line and field named)
BAD_RECORDS = [
    ("gaia", [GAIA[0], _without(GAIA[1], "Question")], 2, "'Question' is "
     "missing; expected a string"),
    ("gaia", [_with(GAIA[0], Level=[1])], 1, r"'Level' is \[1\] \(a list\); "
     r"expected a string \(or a finite number or a boolean"),
    ("gaia", [_with(GAIA[0], **{"Final answer": None})], 1, "'Final answer' "
     r"is None \(null\); expected a string"),
    ("gaia", [_with(GAIA[0], **{"Final answer": {"a": 1}})], 1, "'Final "
     r"answer' is {'a': 1} \(an object\); expected a string"),
    ("gaia", [_with(GAIA[0], **{"Annotator Metadata": "Steps: 1"})], 1,
     r"'Annotator Metadata' is 'Steps: 1' \(a string\), not JSON \(Expecting "
     r"value, column 1\); expected an object"),
    ("gaia", [_with(GAIA[0], **{"Annotator Metadata": "[1]"})], 1,
     r"'Annotator Metadata' is a string holding \[1\] \(a list\); expected "
     "an object"),
    ("gaia", [_with(GAIA[0], task_id=" ")], 1, "'task_id' is empty"),
    ("gaia", [GAIA[0], GAIA[0]], 2, "task id 'c61d22de' already appears at "
     "line 1"),
    ("webwalkerqa", [_without(WEBWALKER[0], "root_url")], 1, "'root_url' is "
     "missing"),
    ("webwalkerqa", [_with(WEBWALKER[0], info={"difficulty_level": [2]})], 1,
     r"'info.difficulty_level' is \[2\] \(a list\); expected a string"),
    ("webwalkerqa", [_with(WEBWALKER[0], info="easy")], 1, "'info' is "
     r"'easy' \(a string\), not JSON"),
    ("hotpotqa", [HOTPOT[0], _with(HOTPOT[1], context=[["T", "one"]])], 2,
     r"'context\[0\]\[1\]' is 'one' \(a string\); expected a list of "
     "sentence strings"),
    ("hotpotqa", [_with(HOTPOT[0], supporting_facts=[["T", "0"]])], 1,
     r"'supporting_facts\[0\]\[1\]' is '0' \(a string\); expected a sentence "
     "index"),
    ("hotpotqa", [_with(HOTPOT[0], supporting_facts=[["T"]])], 1,
     r"'supporting_facts\[0\]' is \['T'\] \(a list\); expected a \[title, "),
    ("hotpotqa", [_without(HOTPOT[0], "answer")], 1, "'answer' is missing"),
    ("hotpotqa", [HOTPOT[0], _with(HOTPOT[1], _id=None)], 2, "'_id' is None "
     r"\(null\)"),
    ("hotpotqa", [_with(HOTPOT[0], answer=float("nan"))], 1, "'answer' is nan "
     r"\(a number\); expected a string \(or a finite number"),
    ("hotpotqa", [_with(HOTPOT[0], context=[[None, ["s"]]])], 1,
     r"'context\[0\]\[0\]' is None \(null\); expected a string"),
    ("hotpotqa", [_with(HOTPOT[0], context='[["T", ["s"]]')], 1,
     r"""'context' is '\[\["T", \["s"\]\]' \(a string\), not JSON \(Expecting """
     r"',' delimiter, column 14\); expected a list of \[title, sentences\]"),
    ("hotpotqa", [_with(HOTPOT[0], supporting_facts='{"T": 0}')], 1,
     r"'supporting_facts' is a string holding {'T': 0} \(an object\); "
     "expected a list"),
    ("musique", [_with(MUSIQUE[0], question_decomposition=[])], 1,
     "'question_decomposition' is empty; expected at least one step"),
    ("musique", [_with(MUSIQUE[0], paragraphs=[{"idx": 0, "title": "G"}])], 1,
     r"'paragraphs\[0\].paragraph_text' is missing"),
    ("musique", [_with(MUSIQUE[0], answer_aliases=["a", ["b"]])], 1,
     r"'answer_aliases\[1\]' is \['b'\] \(a list\)"),
    ("musique", [_with(MUSIQUE[0], paragraphs=json.dumps(
        MUSIQUE[0]["paragraphs"])[:-1])], 1, r"'paragraphs' is '\[\{.{54}"
     r"\.\.\. \(a string\), not JSON \(Expecting ',' delimiter"),
    ("musique", [_with(MUSIQUE[0], paragraphs=[{"title": 1,
                                                "paragraph_text": None}])],
     1, r"'paragraphs\[0\].paragraph_text' is None \(null\)"),
    ("musique", [_with(MUSIQUE[0], answerable="yes")], 1, "'answerable' is "
     "'yes' \\(a string\\); expected a boolean"),
]


@pytest.mark.parametrize("name, records, line, message", BAD_RECORDS)
def test_bad_records_name_file_line_and_field(tmp_path, name, records, line,
                                              message):
  reader, _ = READERS[name]
  path = write_jsonl(tmp_path / f"{name}.jsonl", records)
  with pytest.raises(DataError, match=rf"{path}, line {line}: .*{message}"):
    reader(path)


@pytest.mark.parametrize("name", sorted(READERS))
def test_bad_files(tmp_path, name):
  reader, records = READERS[name]
  with pytest.raises(DataError, match=r"missing.jsonl: no such file"):
    reader(tmp_path / "missing.jsonl")
  empty = tmp_path / "empty.jsonl"
  empty.write_text("\n  \n", encoding="utf-8")
  with pytest.raises(DataError, match=rf"{empty}: the file is empty"):
    reader(empty)
  broken = tmp_path / "broken.jsonl"
  broken.write_text(json.dumps(records[0]) + "\n{oops\n", encoding="utf-8")
  with pytest.raises(DataError, match=rf"{broken}, line 2: not valid JSON"):
    reader(broken)
  not_object = tmp_path / "list.jsonl"
  not_object.write_text("[1, 2]\n", encoding="utf-8")
  with pytest.raises(DataError, match=rf"{not_object}, record 0 \(line 1\): "
                     r"the record is 1 \(an integer\); expected a JSON object"):
    reader(not_object)
  first_broken = tmp_path / "first.jsonl"
  first_broken.write_text(json.dumps(records[0])[:30] + "\n" +
                          json.dumps(records[0]) + "\n", encoding="utf-8")
  with pytest.raises(DataError, match=rf"{first_broken}, line 1: not valid "
                     "JSON"):
    reader(first_broken)



def test_json_list_errors_name_the_record(tmp_path):
  path = tmp_path / "hotpot.json"
  text = json.dumps(HOTPOT, indent=1)
  path.write_text(text.replace('"answer": "Philadelphia"', '"answer": [5]'),
                  encoding="utf-8")
  second = text.splitlines().index(" {", 2) + 1
  with pytest.raises(DataError, match=rf"{path}, record 1 \(line {second}\): "
                     r"field 'answer' is \[5\] \(a list\); expected a string"):
    read_hotpotqa(path)
  path.write_text(text[:-20], encoding="utf-8")
  with pytest.raises(DataError, match=rf"{path}, record 1 \(line {second}\): "
                     r"not valid JSON \(.* at line \d+, column \d+\)"):
    read_hotpotqa(path)
  path.write_text("[]", encoding="utf-8")
  with pytest.raises(DataError, match="holds no records"):
    read_hotpotqa(path)
  path.write_text(text + "\n[]", encoding="utf-8")
  with pytest.raises(DataError, match="text after the closing"):
    read_hotpotqa(path)


def test_wrapped_list_errors_name_the_record(tmp_path):
  path = tmp_path / "hotpot.json"
  records = [HOTPOT[0], _with(HOTPOT[1], _id=None)]
  text = json.dumps({"version": "1.1", "data": records}, indent=2)
  path.write_text(text, encoding="utf-8")
  second = [i for i, line in enumerate(text.splitlines())
            if line == "    {"][1] + 1
  with pytest.raises(DataError, match=rf"{path}, record 1 \(line {second}\): "
                     r"field '_id' is None \(null\); expected a string"):
    read_hotpotqa(path)
  path.write_text(text.replace('"data"', '"dev"'), encoding="utf-8")
  with pytest.raises(DataError, match=rf"{path}: one JSON object with the "
                     r"keys \['dev', 'version'\] and no list under any of "
                     "data, records"):
    read_hotpotqa(path)
  path.write_text(text[:-30], encoding="utf-8")
  with pytest.raises(DataError, match=rf"{path}, line \d+: not valid JSON"):
    read_hotpotqa(path)


def test_hotpotqa_integer_id_at_record_90_of_a_list(tmp_path):
  """The reported failure: a dev file refused at its 91st record, whose _id
  is an integer."""
  records = [_with(HOTPOT[0], _id=f"id{i}") for i in range(90)]
  records.append(_with(HOTPOT[1], _id=5, answer=1987))
  path = tmp_path / "hotpot_dev.json"
  path.write_text(json.dumps(records), encoding="utf-8")
  tasks = read_hotpotqa(path).tasks
  assert len(tasks) == 91
  assert (tasks[90].task_id, tasks[90].answer) == ("5", "1987")


def test_numbers_and_booleans_where_text_is_expected_become_text(tmp_path):
  gaia = read_gaia(write_jsonl(tmp_path / "g.jsonl", [_with(
      GAIA[0], task_id=7, Level=1.5, **{"Final answer": True})])).tasks[0]
  assert (gaia.task_id, gaia.level, gaia.answer) == ("7", "1.5", "true")
  web = read_webwalkerqa(write_jsonl(tmp_path / "w.jsonl", [_with(
      WEBWALKER[0], answer=0.25, info={"difficulty_level": 3})])).tasks[0]
  assert (web.answer, web.level) == ("0.25", "3")
  hotpot = read_hotpotqa(write_jsonl(tmp_path / "h.jsonl", [_with(
      HOTPOT[0], context=[[1987, [1987, "was a year."]]],
      supporting_facts=[[1987, 0]])]))
  (page,) = hotpot.documents
  assert (page.title, page.text) == ("1987", "1987 was a year.")
  assert hotpot.tasks[0].metadata["supporting_doc_ids"] == (page.doc_id,)
  step = {"id": 1, "question": "When?", "answer": 1844}
  musique = read_musique(write_jsonl(tmp_path / "m.jsonl", [_with(
      MUSIQUE[0], id=3, answer_aliases=["a", 2], question_decomposition=[
          step, {**step, "question": "After #1?", "answer": "x"}])]))
  (task,) = musique.tasks
  assert (task.task_id, task.answers) == ("3", ("Miquette Giraudy", "a", "2"))
  assert [(s.question, s.answer) for s in task.sub_questions] == [
      ("When?", "1844"), ("After 1844?", "x")]


LAYOUTS = {
    "jsonl": lambda records: "".join(json.dumps(r) + "\n" for r in records),
    "crlf_jsonl": lambda records: "".join(json.dumps(r) + "\r\n"
                                          for r in records),
    "list": json.dumps,
    "pretty_list": lambda records: json.dumps(records, indent=2),
    "wrapped": lambda records: json.dumps({"version": 1, "data": records}),
    "pretty_wrapped": lambda records: json.dumps(
        {"meta": {"tags": ["a"]}, "questions": records}, indent=2),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(READERS))
def test_every_layout_reads_the_same(tmp_path, name, layout):
  reader, records = READERS[name]
  want = reader(write_jsonl(tmp_path / "want.jsonl", records))
  # The extension misleads on purpose: the content decides.
  path = tmp_path / ("data.json" if "jsonl" in layout else "data.jsonl")
  path.write_text(LAYOUTS[layout](records), encoding="utf-8")
  got = reader(path)
  assert (got.tasks, got.documents) == (want.tasks, want.documents)


STRINGIFIED = {
    "gaia": ("Annotator Metadata",),
    "webwalkerqa": ("info",),
    "hotpotqa": ("context", "supporting_facts"),
    "musique": ("paragraphs", "question_decomposition", "answer_aliases"),
}


@pytest.mark.parametrize("name", sorted(STRINGIFIED))
def test_nested_fields_given_as_json_strings_are_parsed(tmp_path, name):
  reader, records = READERS[name]
  stringified = [{k: json.dumps(v) if k in STRINGIFIED[name] else v
                  for k, v in record.items()} for record in records]
  assert stringified != records
  want = reader(write_jsonl(tmp_path / "want.jsonl", records))
  got = reader(write_jsonl(tmp_path / "got.jsonl", stringified))
  assert (got.tasks, got.documents) == (want.tasks, want.documents)


CANARY = "canary GUID 0a1b"


@pytest.mark.parametrize("row, message", [
    (xbench_row("2", "哪一年？", "1998年", "", CANARY, key="other key!"),
     "'prompt' does not decrypt to UTF-8 text with the canary"),
    (xbench_row("2", "Which year?", "1998", "", CANARY, key="bad"),
     "'prompt' decrypts to text with control characters"),
    (["2", "%%not base64%%", encode("A", CANARY), "", CANARY],
     "'prompt' is '%%not base64%%' .*, not base64"),
    (["2", "", encode("A", CANARY), "", CANARY], "'prompt' is empty"),
    (["2", encode("Q?", CANARY), encode("A", CANARY), "", ""],
     "'canary' is empty"),
    (["2", encode("Q?", CANARY)], "'canary' is missing"),
])
def test_xbench_bad_rows_name_the_row(tmp_path, row, message):
  good = xbench_row("1", "Q?", "A", "", CANARY)
  path = write_xbench(tmp_path / "x.csv", [good, row])
  with pytest.raises(DataError, match=rf"{path}, row 2 \(line 3\): field "
                     f"{message}"):
    read_xbench(path)


def test_xbench_bad_files(tmp_path):
  path = tmp_path / "x.csv"
  path.write_text("id,prompt,answer\n1,a,b\n", encoding="utf-8")
  with pytest.raises(DataError, match=r"line 1: the header .* lacks the "
                     r"column\(s\) \['canary'\]"):
    read_xbench(path)
  path.write_text("id,prompt,answer,canary\n", encoding="utf-8")
  with pytest.raises(DataError, match="a header but no rows"):
    read_xbench(path)
  path.write_bytes(b"id,prompt\n\xff\xfe\n")
  with pytest.raises(DataError, match="is not UTF-8"):
    read_xbench(path)
