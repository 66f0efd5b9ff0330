"""The reader's check: the same questions over pages whose facts changed.

A team that reads answers from the page it visited; one that recalls
answers what it memorised. To tell them apart, `counterfactual` moves the
last hop of each question to another entity of the same kind (the page of
the hop's source now states the new target, and every back-link agrees:
the pages are written again from the changed links), and keeps the
questions whose answer changed. Run on those pages, the share of answers
that follow the page ("counterfactual_follows") is near the team's
accuracy for a reader and near 0 for a memoriser, whose answers match the
old answer instead ("counterfactual_recalls").
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from mgrpo_jax.data.corpus import Document
from mgrpo_jax.data.task import Task
from mgrpo_jax.data.world import RELATIONS, World, documents_of, task_of

_RELATION_ID = {r.name: i for i, r in enumerate(RELATIONS)}


def _path(task: Task, index: dict[str, int]) -> list[int] | None:
  doc_ids = task.metadata.get("doc_ids") if task.metadata else None
  if not doc_ids or any(d not in index for d in doc_ids):
    return None
  return [index[d] for d in doc_ids]


def counterfactual(world: World, tasks: Sequence[Task], *, seed: int = 0
                   ) -> tuple[tuple[Task, ...], tuple[Document, ...]]:
  """(the tasks whose answer the change moved, with their new answers and
  decompositions; the changed world's pages). Tasks that are not the
  world's questions are left out."""
  index = {e.doc_id: e.index for e in world.entities}
  rng = np.random.default_rng([seed, 7])
  links = [dict(e.links) for e in world.entities]
  changed: set[tuple[int, str]] = set()
  for task in tasks:
    path = _path(task, index)
    if path is None:
      continue
    source, relation = path[-2], task.metadata["relations"][-1]
    if (source, relation) in changed:
      continue
    kind = world.entities[path[-1]].kind
    pool = [e.index for e in world.entities
            if e.kind == kind and e.index not in path]
    if pool:
      links[source][relation] = pool[int(rng.integers(len(pool)))]
      changed.add((source, relation))
  entities = tuple(dataclasses.replace(e, links=links[e.index])
                   for e in world.entities)
  out = []
  for task in tasks:
    path = _path(task, index)
    if path is None:
      continue
    relations = task.metadata["relations"]
    new_path = [path[0]]
    for relation in relations:
      new_path.append(entities[new_path[-1]].links[relation])
    if len(set(new_path)) < len(new_path):  # Revisits: never asked.
      continue
    new = task_of(task.task_id, tuple(new_path),
                  tuple(_RELATION_ID[r] for r in relations), entities)
    if new.answer != task.answer:
      out.append(dataclasses.replace(
          new, metadata={**new.metadata, "original_answer": task.answer}))
  return tuple(out), documents_of(entities)
