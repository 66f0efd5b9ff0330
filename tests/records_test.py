"""Records of a data file: the JSON layouts told apart by content, each
record's place (line, or record index and line), and the fields' checks
(numbers read as text, JSON strings parsed, the rest refused by name)."""

import json
import math
import pathlib

import pytest

from mgrpo_jax.data.records import (DataError, Record, first_json_record,
                                    json_records, show)

ROWS = [{"id": "a", "n": 1}, {"id": "b", "n": 2}, {"id": "c", "n": 3}]


def write(path, text):
  path.write_text(text, encoding="utf-8")
  return path


def record(data, where="line 4"):
  return Record(pathlib.Path("f.jsonl"), where, data)


def test_show_names_the_kind_and_shortens():
  assert show(None) == "None (null)"
  assert show([1]) == "[1] (a list)"
  assert show(math.nan) == "nan (a number)"
  long = show("x" * 100)
  assert long == "'" + "x" * 56 + "... (a string)"


@pytest.mark.parametrize("value, text", [
    ("a b", "a b"), ("", ""), (5, "5"), (-3, "-3"), (10**20, str(10**20)),
    (1.5, "1.5"), (1987.0, "1987.0"), (True, "true"), (False, "false"),
])
def test_text_reads_scalars_as_their_json_text(value, text):
  assert record({"f": value}).text("f", allow_empty=True) == text
  assert record({}).string("f", value) == text


@pytest.mark.parametrize("value, shown", [
    (None, r"None \(null\)"), ([1], r"\[1\] \(a list\)"),
    ({"a": 1}, r"{'a': 1} \(an object\)"), (math.nan, r"nan \(a number\)"),
    (math.inf, r"inf \(a number\)"),
])
def test_text_refuses_null_lists_objects_and_nan(value, shown):
  with pytest.raises(DataError, match=r"^f.jsonl, line 4: field 'f' is "
                     rf"{shown}; expected a string \(or a finite number"):
    record({"f": value}).text("f")
  with pytest.raises(DataError, match=r"field 'f\[1\]' is "):
    record({"f": ["ok", value]}).texts("f")


def test_text_missing_empty_and_optional():
  with pytest.raises(DataError, match="field 'f' is missing; expected a "
                     "string"):
    record({}).text("f")
  with pytest.raises(DataError, match="field 'f' is empty"):
    record({"f": " "}).text("f")
  assert record({"f": None}).text("f", optional=True) == ""
  assert record({}).texts("f", optional=True) == ()


def test_fields_given_as_json_strings_are_parsed():
  data = {"l": '[["t", ["s"]]]', "d": '{"k": 1}', "t": '["a", 2]'}
  assert record(data).field("l", (list,), "a list") == [["t", ["s"]]]
  assert record(data).field("d", (dict,), "an object") == {"k": 1}
  assert record(data).texts("t") == ("a", "2")
  assert record(data).nested("d").text("k") == "1"
  # Where a string is allowed, it stays a string.
  assert record(data).field("d", (str, dict), "text or an object") == (
      '{"k": 1}')


@pytest.mark.parametrize("value, problem", [
    ("[1, 2", r"is '\[1, 2' \(a string\), not JSON \(Expecting ',' "
     r"delimiter, column 6\)"),
    ("", r"is '' \(a string\), not JSON \(Expecting value, column 1\)"),
    ('{"k": 1}', r"is a string holding {'k': 1} \(an object\)"),
    ("5", r"is a string holding 5 \(an integer\)"),
])
def test_json_strings_of_the_wrong_shape_are_refused(value, problem):
  with pytest.raises(DataError, match=r"^f.jsonl, record 2 \(line 9\): "
                     rf"field 'l' {problem}; expected a list of pairs\.$"):
    record({"l": value}, "record 2 (line 9)").field("l", (list,),
                                                     "a list of pairs")


def test_nested_records_prefix_their_fields():
  info = record({"info": {"level": [1]}}).nested("info")
  with pytest.raises(DataError, match=r"field 'info.level' is \[1\]"):
    info.text("level")
  assert record({}).nested("info", optional=True) is None
  with pytest.raises(DataError, match=r"field 'info' is 3 \(an integer\); "
                     "expected an object"):
    record({"info": 3}).nested("info")


LAYOUTS = {
    "jsonl": "".join(json.dumps(r) + "\n" for r in ROWS),
    "list": json.dumps(ROWS),
    "pretty_list": json.dumps(ROWS, indent=2),
    "wrapped": json.dumps({"version": "1", "data": ROWS}),
    "pretty_wrapped": json.dumps({"tags": ["x", {"data": 1}], "n": 3,
                                  "records": ROWS}, indent=2),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layouts_are_told_by_content(tmp_path, layout):
  path = write(tmp_path / "any.name", "\n  " + LAYOUTS[layout])
  records = json_records(path)
  assert [r.data for r in records] == ROWS
  assert first_json_record(path).data == ROWS[0]
  where = records[2].where
  assert where == "line 4" if layout == "jsonl" else where.startswith(
      "record 2 (line ")


def test_list_records_name_index_and_starting_line(tmp_path):
  path = write(tmp_path / "l.json", json.dumps(ROWS, indent=2))
  lines = path.read_text().splitlines()
  starts = [i + 1 for i, line in enumerate(lines) if line == "  {"]
  assert [r.where for r in json_records(path)] == [
      f"record {k} (line {line})" for k, line in enumerate(starts)]
  wrapped = write(tmp_path / "w.json",
                  json.dumps({"meta": [1, 2], "data": ROWS}, indent=2))
  lines = wrapped.read_text().splitlines()
  starts = [i + 1 for i, line in enumerate(lines) if line == "    {"]
  assert [r.where for r in json_records(wrapped)] == [
      f"record {k} (line {line})" for k, line in enumerate(starts)]


def test_one_line_object_without_a_wrapping_key_is_one_record(tmp_path):
  path = write(tmp_path / "one.jsonl", json.dumps({"data": "x", "n": 1}))
  (only,) = json_records(path)
  assert (only.where, only.data) == ("line 1", {"data": "x", "n": 1})


def test_json_lines_split_only_at_newlines(tmp_path):
  rows = [{"id": "a\u2028b\x85c"}, {"id": "d"}]
  path = tmp_path / "u.jsonl"
  path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                          for r in rows), encoding="utf-8")
  assert [(r.where, r.data) for r in json_records(path)] == [
      ("line 1", rows[0]), ("line 2", rows[1])]


@pytest.mark.parametrize("text, message", [
    (json.dumps(ROWS[0])[:-5] + "\n" + json.dumps(ROWS[1]) + "\n",
     r"line 1: not valid JSON \(.*\); expected one JSON object per line"),
    (json.dumps(ROWS[0]) + "\n[1]\n",
     r"line 2: the line holds \[1\] \(a list\); expected a JSON object"),
    (json.dumps(ROWS, indent=2)[:-12],
     r"record 2 \(line 10\): not valid JSON \(.* at line 12, column \d+\)"),
    ('[{"a": 1} {"b": 2}]',
     r"line 1: '{\"b\": 2}\]' after record 0; expected ',' or '\]'"),
    ('[{"a": 1}, 7]', r"record 1 \(line 1\): the record is 7 \(an integer\)"),
    (json.dumps({"data": ROWS}, indent=2)[:-3],
     r"line 1\d: not valid JSON \(.*\); expected JSON Lines, a JSON list of "
     "records, or one object holding the list under one of the keys data"),
    (json.dumps({"data": ROWS}, indent=2) + "\n{}",
     "line 1[0-9]: text after the object's closing '}'"),
    (json.dumps({"version": 1, "rows_v2": ROWS}, indent=2),
     r"one JSON object with the keys \['rows_v2', 'version'\] and "
     "no list under any of data, records, examples, items, questions, "
     "tasks, rows"),
    (json.dumps({"data": [1]}), r"record 0 \(line 1\): the record is 1"),
    (json.dumps({"data": []}), "the file holds no records"),
    ("\n\n", "the file is empty"),
])
def test_malformed_files_are_refused_by_place(tmp_path, text, message):
  path = write(tmp_path / "bad.json", text)
  with pytest.raises(DataError, match=rf"^{path}(, |: ){message}"):
    json_records(path)
