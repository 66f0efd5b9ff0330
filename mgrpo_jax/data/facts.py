"""Facts of the synthetic world's relations, read from text.

The world (data/world.py) writes every relation as a question template
("Who founded {x}?") and a fact template ("{s} was founded by {t}."). These
helpers run them backwards: which relation and entity a one-hop question
asks about, and which target a page states. The oracle (agents/oracle.py)
plays from them and the diagnostics (agents/diagnostics.py) grade with them.
"""

from __future__ import annotations

import re

from mgrpo_jax.data.world import RELATIONS, Relation


def _template(pattern: str, **slots: str) -> re.Pattern:
  """A relation template as a regex; `slots` fill its {fields}."""
  parts = re.split(r"(\{\w+\})", pattern)
  return re.compile("".join(slots[p[1:-1]] if p.startswith("{")
                            else re.escape(p) for p in parts))


_QUESTIONS = [(r, _template(r.question, x="(.+)")) for r in RELATIONS]


def parse_step(text: str) -> tuple[Relation, str] | None:
  """(relation, entity) of a one-hop question such as "Who founded X?"."""
  for relation, pattern in _QUESTIONS:
    match = pattern.fullmatch(text.strip())
    if match:
      return relation, match.group(1)
  return None


def read_fact(relation: Relation, entity: str, page: str) -> str | None:
  """The target a page states for `relation` of `entity`, if it does."""
  fact = _template(relation.fact, s=re.escape(entity), t="([^.\n]+?)")
  match = fact.search(page)
  return match.group(1) if match else None


def entity_of(task_text: str) -> str:
  """The entity a one-hop question names (the whole text if none)."""
  parsed = parse_step(task_text)
  return parsed[1] if parsed else task_text
