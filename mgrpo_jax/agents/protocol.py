"""The chat protocol both agents speak, and a parser that never raises.

One assistant turn is free text (reasoning) followed by exactly one action:

  * a tool call, as JSON inside tags:
      <tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>
  * or the final answer:
      <answer>Paris</answer>

Anything else is a format failure: no action, two tool calls, a call and an
answer together, bad JSON, an unknown tool, missing or unexpected arguments,
an argument of the wrong type. `parse_turn` turns every such case into a
`Turn` with `format_ok=False` and an error message written for the agent,
which the rollout returns to it as the tool result so it can recover.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Mapping

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
# The text that ends a turn with a tool call: the sampler's stop string.
STOP_STRINGS = (CALL_CLOSE, ANSWER_CLOSE)

_CALL = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE),
                   re.S)
_ANSWER = re.compile(re.escape(ANSWER_OPEN) + r"(.*?)"
                     + re.escape(ANSWER_CLOSE), re.S)
_JSON_TYPES = {"string": str, "integer": int, "number": (int, float),
               "boolean": bool, "object": dict, "array": list}


@dataclasses.dataclass(frozen=True)
class ToolSpec:
  """A tool's name and its arguments: name -> JSON type ("string", ...)."""
  name: str
  required: Mapping[str, str]
  optional: Mapping[str, str] = dataclasses.field(default_factory=dict)
  description: str = ""

  def __post_init__(self):
    for arg, kind in {**self.required, **self.optional}.items():
      if kind not in _JSON_TYPES:
        raise ValueError(f"ToolSpec {self.name!r}: argument {arg!r} has type "
                         f"{kind!r}; expected one of {sorted(_JSON_TYPES)}.")


@dataclasses.dataclass(frozen=True)
class Turn:
  """What one assistant turn asked for.

  kind is "tool_call" (name, arguments set), "answer" (answer set) or
  "error" (error set, format_ok False).
  """
  kind: str
  format_ok: bool
  name: str | None = None
  arguments: dict[str, Any] | None = None
  answer: str | None = None
  error: str | None = None


def _error(message: str) -> Turn:
  return Turn(kind="error", format_ok=False, error=message)


def _type_ok(value: Any, kind: str) -> bool:
  if kind in ("integer", "number") and isinstance(value, bool):
    return False
  return isinstance(value, _JSON_TYPES[kind])


def parse_turn(text: Any, tools: Mapping[str, ToolSpec]) -> Turn:
  """Parses one assistant turn; never raises, whatever `text` is."""
  if not isinstance(text, str):
    return _error(f"the turn must be text; got {type(text).__name__}.")
  calls = _CALL.findall(text)
  answers = _ANSWER.findall(text)
  names = ", ".join(sorted(tools))
  if calls and answers:
    return _error("a turn holds either one tool call or the final answer, "
                  "not both.")
  if len(calls) > 1:
    return _error(f"one tool call per turn; this turn has {len(calls)}.")
  if len(answers) > 1:
    return _error(f"one {ANSWER_OPEN}...{ANSWER_CLOSE} per turn; this turn "
                  f"has {len(answers)}.")
  if answers:
    return Turn(kind="answer", format_ok=True, answer=answers[0].strip())
  if not calls:
    unclosed = CALL_OPEN in text or ANSWER_OPEN in text
    return _error(
        ("a tag was opened but not closed; " if unclosed else "")
        + f"end the turn with {CALL_OPEN}{{\"name\": ..., \"arguments\": "
        f"{{...}}}}{CALL_CLOSE} (tools: {names}) or with "
        f"{ANSWER_OPEN}your answer{ANSWER_CLOSE}.")
  try:
    call = json.loads(calls[0])
  except (ValueError, RecursionError) as e:
    return _error(f"the tool call is not valid JSON ({e}).")
  if not isinstance(call, dict) or not isinstance(call.get("name"), str):
    return _error('the tool call must be a JSON object with a "name" string '
                  'and an "arguments" object.')
  spec = tools.get(call["name"])
  if spec is None:
    return _error(f"unknown tool {call['name']!r}; the tools are: {names}.")
  arguments = call.get("arguments", {})
  if not isinstance(arguments, dict):
    return _error(f'"arguments" of {spec.name} must be a JSON object.')
  missing = sorted(set(spec.required) - set(arguments))
  if missing:
    return _error(f"{spec.name} needs the arguments {missing}.")
  known = {**spec.required, **spec.optional}
  unexpected = sorted(set(arguments) - set(known))
  if unexpected:
    return _error(f"{spec.name} has no arguments {unexpected}; it takes "
                  f"{sorted(known)}.")
  for arg, value in arguments.items():
    if not _type_ok(value, known[arg]):
      return _error(f"argument {arg!r} of {spec.name} must be of type "
                    f"{known[arg]}; got {type(value).__name__}.")
  return Turn(kind="tool_call", format_ok=True, name=spec.name,
              arguments=dict(arguments))


def render_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
  """The text of a tool call, as an agent should write it."""
  body = json.dumps({"name": name, "arguments": dict(arguments)},
                    ensure_ascii=False)
  return f"{CALL_OPEN}{body}{CALL_CLOSE}"


def render_answer(answer: str) -> str:
  """The text of a final answer."""
  return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


# A sub-agent report is "<answer>. Evidence: <the page's sentence>".
EVIDENCE = ". Evidence: "  # Separates a report's answer from its evidence.


def report_answer(report: str) -> str:
  """The answer part of a sub-agent report."""
  return report.split(EVIDENCE)[0].strip().rstrip(".").strip()
