"""System prompts and controller messages of the agents.

Every prompt spells out the protocol (`agents/protocol.py`): at most one
tool call per turn as JSON inside <tool_call> tags, the final answer inside
<answer> tags. The tool list is generated from the tools' specs, so a tool a
user registers is described to the agent without editing a prompt.
"""

from __future__ import annotations

from typing import Mapping

from mgrpo_jax.agents.protocol import (ANSWER_CLOSE, ANSWER_OPEN, ToolSpec,
                                       render_tool_call)

MAIN_ROLE = (
    "You are the main agent of a research team. You answer the user's "
    "question. You cannot search yourself: give one focused sub-task at a "
    "time to a sub-agent with the delegate tool; it searches a document "
    "collection and reports back. Break multi-step questions into steps and "
    "delegate them one by one.")
SUB_ROLE = (
    "You are a research sub-agent. You get one task from the main agent. "
    "Search the document collection, read the most relevant pages, and "
    "finish with a short report of what you found (the answer to the task "
    "first, then the evidence).")
VERIFIER_ROLE = (
    "You are a verifier sub-agent. You get one claim from the main agent. "
    "Find the page the claim is about, read it, and finish with a short "
    "verdict: supported or not supported, then the page's sentence that "
    "decides it.")
SINGLE_ROLE = (
    "You are a research agent. Answer the user's question by searching a "
    "document collection and reading pages.")
REASONER_ROLE = (
    "You solve the given problem by careful step-by-step reasoning and end "
    "with the result.")

ANSWER_NOW = ("You are about to run out of turns or context: give your final "
              f"answer now, as {ANSWER_OPEN}...{ANSWER_CLOSE}.")


def _describe(spec: ToolSpec) -> str:
  args = [f"{name} ({kind})" for name, kind in spec.required.items()]
  args += [f"{name} ({kind}, optional)" for name, kind in spec.optional.items()]
  return f"- {spec.name}({', '.join(args)}): {spec.description}"


PROMPT_STYLES = ("full", "brief")


def _brief_tool(spec: ToolSpec) -> str:
  return f"{spec.name}({', '.join(spec.required)})"


def system_prompt(instructions: str, tools: Mapping[str, ToolSpec],
                  style: str = "full") -> str:
  """`instructions` (an agent's prompts.*_ROLE text) followed by the
  protocol and the tool list.

  style "full": the whole instructions, every tool with its arguments and
  description, the protocol with an example call (~200 ids with the tiny
  tokenizer, ~300 with SmolLM2's). "brief": the instructions' first sentence and
  one line naming the tools and the protocol's tags (~30 ids), for a model
  that learns the protocol from demonstrations (the tiny team), where the
  full prompt would be half of every sequence it trains on.
  """
  if style not in PROMPT_STYLES:
    raise ValueError(f"prompt style {style!r}: expected one of "
                     f"{list(PROMPT_STYLES)}.")
  if style == "brief":
    first = instructions.split(". ")[0].rstrip(".") + "."
    if not tools:
      return first
    names = ", ".join(_brief_tool(spec) for spec in tools.values())
    return (f"{first}\nTools: {names}. Per turn one <tool_call>{{json}}"
            f"</tool_call> or {ANSWER_OPEN}answer{ANSWER_CLOSE}.")
  if not tools:
    return instructions
  example_spec = next(iter(tools.values()))
  example = render_tool_call(
      example_spec.name, {a: "..." for a in example_spec.required})
  lines = [instructions, "", "Tools:"]
  lines += [_describe(spec) for spec in tools.values()]
  lines += [
      "",
      "Each turn: think briefly, then either call exactly one tool, e.g.",
      example,
      f"or give your final answer as {ANSWER_OPEN}answer{ANSWER_CLOSE}.",
      "Tool results come back in the next message.",
  ]
  return "\n".join(lines)


def tool_result(name: str, text: str) -> str:
  """The message that carries a tool's output back to the agent."""
  return f"<tool_response name=\"{name}\">\n{text}\n</tool_response>"


def format_error(error: str) -> str:
  """The message that tells the agent its turn broke the protocol."""
  return f"Format error: {error}"
