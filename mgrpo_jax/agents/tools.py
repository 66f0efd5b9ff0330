"""Tools the agents call, over a local corpus, behind a registry users extend.

  search(query, k)    BM25 (bm25s) over the corpus: ids, titles, snippets.
  visit(page, goal)   the page's text cut to a budget, the passages that share
                      the most words with `goal` first.

`SearchBackend` is the interface a search backend implements (search and
fetch); `LocalCorpus` is the offline one, `agents.web.WebBackend` the live
one. A tool never raises on what an agent wrote: a bad page id or an empty
query comes back as text the agent reads, and so does a `ToolError` a backend
raises (a service that timed out, a binary page): `search_and_visit`
returns its sentence as the tool result, while any other exception is a
bug and is raised. Bad corpora (empty, duplicate ids) raise when the corpus
is built. `visit`'s budget is `agents.visit_chars` in a run's config.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Mapping, Protocol, Sequence

from mgrpo_jax.agents.protocol import ToolSpec
from mgrpo_jax.data.corpus import Document, LocalCorpus, SearchHit, words

__all__ = ["Document", "LocalCorpus", "SearchBackend", "SearchHit", "Tool",
           "ToolError", "ToolRegistry", "search_and_visit", "visit_text"]


class ToolError(Exception):
  """A backend failure the agent should read rather than crash on (a web
  service timed out, a page is binary): `search_and_visit`'s tools return
  `str(error)`, a whole sentence starting "Error: ", as the tool result."""


class SearchBackend(Protocol):
  """What `search` and `visit` need: implement it for a live web backend.
  Both may raise `ToolError`; its message becomes the tool result."""

  def search(self, query: str, k: int) -> list[SearchHit]:
    """The k best pages for `query`, best first (fewer if fewer match)."""

  def fetch(self, doc_id: str) -> Document | None:
    """The page with this id, or None when there is none."""


def _passages(text: str) -> list[str]:
  parts = [p.strip() for p in re.split(r"\n\s*\n|(?<=[.!?])\s+", text)]
  return [p for p in parts if p]


def visit_text(doc: Document, goal: str, budget_chars: int) -> str:
  """The page cut to `budget_chars`: passages sharing most words with the
  goal first (ties keep page order), then the rest in page order."""
  goal_words = set(words(goal))
  passages = _passages(doc.text)
  overlap = [len(goal_words & set(words(p))) for p in passages]
  order = sorted(range(len(passages)), key=lambda i: (-overlap[i], i))
  out, used = [], 0
  for i in order:
    if used + len(passages[i]) > budget_chars:
      if not out:  # the best passage alone is too long: cut it
        out.append(passages[i][:budget_chars])
      break
    out.append(passages[i])
    used += len(passages[i]) + 1
  return f"# {doc.title}\n" + "\n".join(out)


@dataclasses.dataclass(frozen=True)
class Tool:
  """A tool: its protocol spec and the function that runs it (-> text)."""
  spec: ToolSpec
  run: Callable[[Mapping[str, Any]], str]


class ToolRegistry:
  """Name -> Tool; `specs()` feeds the protocol parser."""

  def __init__(self, tools: Sequence[Tool] = ()):
    self._tools: dict[str, Tool] = {}
    for tool in tools:
      self.register(tool)

  def register(self, tool: Tool) -> None:
    if tool.spec.name in self._tools:
      raise ValueError(f"tool {tool.spec.name!r} is already registered.")
    self._tools[tool.spec.name] = tool

  def specs(self) -> dict[str, ToolSpec]:
    return {name: tool.spec for name, tool in self._tools.items()}

  def run(self, name: str, arguments: Mapping[str, Any]) -> str:
    """Runs a parsed call; an unknown name comes back as text, not a raise."""
    tool = self._tools.get(name)
    if tool is None:
      return f"Error: unknown tool {name!r}; the tools are {sorted(self._tools)}."
    return tool.run(arguments)


def search_and_visit(backend: SearchBackend, *, default_k: int = 5,
                     visit_budget_chars: int = 2000,
                     snippet_chars: int | None = None) -> list[Tool]:
  """The sub-agent's `search` and `visit` tools over a backend; each search
  hit's snippet is cut to `snippet_chars` (None: as the backend gives it)."""

  def search(arguments: Mapping[str, Any]) -> str:
    try:
      hits = backend.search(arguments["query"],
                            int(arguments.get("k", default_k)))
    except ToolError as e:
      return str(e)
    if not hits:
      return "No results. Try other words."
    return "\n".join(f"[{h.doc_id}] {h.title}: {h.snippet[:snippet_chars]}"
                     for h in hits)

  def visit(arguments: Mapping[str, Any]) -> str:
    try:
      doc = backend.fetch(arguments["page"])
    except ToolError as e:
      return str(e)
    if doc is None:
      return (f"Error: no page {arguments['page']!r}; use an id in brackets "
              "from a search result.")
    return visit_text(doc, arguments["goal"], visit_budget_chars)

  return [
      Tool(ToolSpec("search", {"query": "string"}, {"k": "integer"},
                    "Search the corpus; returns [id] title: snippet lines."),
           search),
      Tool(ToolSpec("visit", {"page": "string", "goal": "string"},
                    description="Read a page, passages relevant to goal "
                    "first."), visit),
  ]
