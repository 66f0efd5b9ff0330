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


def hop_facts(sub_questions) -> tuple[str, ...] | None:
  """The sentences that state each hop's answer on its page, in the
  world's own words ("Nuko Besho works for Tavi Labs."), for a task's gold
  decomposition; None when a hop is not one of the world's relations (a
  file's decomposition: no sentence to look for)."""
  facts = []
  for step in sub_questions:
    parsed = parse_step(step.question)
    if parsed is None:
      return None
    relation, entity = parsed
    facts.append(relation.fact.format(s=entity, t=step.answer))
  return tuple(facts) or None
