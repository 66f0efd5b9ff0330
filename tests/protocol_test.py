"""parse_turn: round trips, every format failure, and fuzzing (never raises)."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mgrpo_jax.agents.protocol import (ToolSpec, Turn, parse_turn,
                                       render_answer, render_tool_call)

TOOLS = {
    "search": ToolSpec("search", {"query": "string"}, {"k": "integer"}),
    "visit": ToolSpec("visit", {"page": "string", "goal": "string"}),
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)


@given(query=st.text(max_size=60), k=st.integers(-5, 50),
       reasoning=st.text(max_size=80).filter(lambda s: "<" not in s))
def test_tool_call_round_trip(query, k, reasoning):
  text = reasoning + render_tool_call("search", {"query": query, "k": k})
  turn = parse_turn(text, TOOLS)
  assert turn == Turn(kind="tool_call", format_ok=True, name="search",
                      arguments={"query": query, "k": k})


@given(answer=st.text(max_size=60).filter(lambda s: "</answer>" not in s))
def test_answer_round_trip(answer):
  turn = parse_turn("I think so.\n" + render_answer(answer), TOOLS)
  assert turn.kind == "answer" and turn.format_ok
  assert turn.answer == answer.strip()


@given(text=st.text(max_size=200))
def test_arbitrary_text_never_raises(text):
  turn = parse_turn(text, TOOLS)
  assert isinstance(turn, Turn)
  assert turn.format_ok == (turn.kind != "error")


@given(payload=json_values)
def test_arbitrary_json_in_tags_never_raises(payload):
  turn = parse_turn(f"<tool_call>{json.dumps(payload)}</tool_call>", TOOLS)
  assert turn.kind == "error" and not turn.format_ok and turn.error


@pytest.mark.parametrize("text, message", [
    ("just thinking", "end the turn with <tool_call>"),
    ("<tool_call>{\"name\": \"search\"", "opened but not closed"),
    ("<tool_call>{bad json}</tool_call>", "not valid JSON"),
    ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
    ('<tool_call>{"name": "browse", "arguments": {}}</tool_call>',
     "unknown tool 'browse'; the tools are: search, visit"),
    ('<tool_call>{"name": "visit", "arguments": {"page": "p"}}</tool_call>',
     "visit needs the arguments ['goal']"),
    ('<tool_call>{"name": "search", "arguments": {"query": "q", "x": 1}}'
     '</tool_call>', "search has no arguments ['x']"),
    ('<tool_call>{"name": "search", "arguments": {"query": 3}}</tool_call>',
     "argument 'query' of search must be of type string; got int"),
    ('<tool_call>{"name": "search", "arguments": {"query": "q", "k": true}}'
     '</tool_call>', "argument 'k' of search must be of type integer; got bool"),
    ('<tool_call>{"name": "search", "arguments": "q"}</tool_call>',
     '"arguments" of search must be a JSON object'),
    (render_tool_call("search", {"query": "a"})
     + render_tool_call("search", {"query": "b"}), "one tool call per turn"),
    (render_tool_call("search", {"query": "a"}) + render_answer("x"),
     "not both"),
    (render_answer("a") + render_answer("b"), "this turn has 2"),
    (None, "the turn must be text; got NoneType"),
])
def test_format_failures_explain_themselves(text, message):
  turn = parse_turn(text, TOOLS)
  assert turn.kind == "error" and not turn.format_ok
  assert message in turn.error


def test_bad_tool_spec():
  with pytest.raises(ValueError, match="argument 'q' has type 'str'"):
    ToolSpec("search", {"q": "str"})
