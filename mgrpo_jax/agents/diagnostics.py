"""Per-agent diagnostics of evaluation rollouts: which agent improved.

`team_diagnostics` reads the greedy rollouts of an evaluation and the
world's pages, and says what each agent did, separately:

  sub_report_accuracy      reports whose answer (before ". Evidence:") is
                           the true answer of the one-hop question the
                           planner delegated, read from the page of the
                           entity it names, or, for a sub-question of a
                           task's gold decomposition (MuSiQue's), its gold
                           answer; over gradeable delegations
  sub_gradeable            delegations that are a one-hop question of the
                           world about an entity that has a page, or a gold
                           sub-question (the rest, a planner's garbled or
                           own wording, cannot be graded)
  sub_read_accuracy        sub_report_accuracy over the gradeable
                           delegations whose conversation visited a page
                           (what the sub-agent makes of a page it read)
  sub_visit_rate           sub-agent conversations that visited a page
  sub_wrong_page           of those that visited a page and were asked a
                           one-hop question about an entity with a page,
                           the share that never visited that entity's page
                           (took a distractor)
  main_early_answer        multi-hop rollouts answered with fewer
                           delegations than the question has hops (the
                           planner answering before the last hop)
  sub_searches_per_report  searches per sub-agent conversation that reported
  visits_per_hop           page visits by any agent per hop the questions
                           need (single agent and team alike)
  main_delegations_hop<h>  delegations per question of h hops (a planner
                           that decomposes delegates h times); questions
                           whose hops the data does not say are left out

Sub-agent figures are absent when no rollout delegated.
"""

from __future__ import annotations

import collections
import re
from typing import Sequence

import numpy as np

from mgrpo_jax.agents.protocol import report_answer
from mgrpo_jax.agents.trajectory import Rollout
from mgrpo_jax.data.corpus import Document
from mgrpo_jax.data.facts import parse_step, read_fact
from mgrpo_jax.data.task import Task


def normalised(text: str) -> str:
  return " ".join(re.findall(r"\w+", text.lower()))


class Grader:
  """The true answer of a one-hop question: read from the world's pages, or
  the gold answer of a sub-question of `tasks`' decompositions."""

  def __init__(self, documents: Sequence[Document],
               tasks: Sequence[Task] = ()):
    self.pages = {d.title.strip().lower(): d.text for d in documents}
    self.page_of = {d.title.strip().lower(): d.doc_id for d in documents}
    self.gold = {s.question: s.answer for t in tasks
                 for s in t.sub_questions}

  def answer(self, question: str) -> str | None:
    """The answer the page of the question's entity states, else the gold
    answer of that sub-question (None: neither)."""
    parsed = parse_step(question)
    if parsed is None:
      return self.gold.get(question)
    relation, entity = parsed
    page = self.pages.get(entity.strip().lower())
    stated = None if page is None else read_fact(relation, entity, page)
    return stated if stated is not None else self.gold.get(question)

  def page_id(self, question: str) -> str | None:
    """The id of the page of the entity a one-hop question names."""
    parsed = parse_step(question)
    return None if parsed is None else self.page_of.get(
        parsed[1].strip().lower())

  def report_correct(self, question: str, report: str | None) -> bool | None:
    """Whether `report` answers `question` (None: cannot be graded)."""
    gold = self.answer(question)
    if gold is None:
      return None
    return report is not None and (normalised(report_answer(report))
                                   == normalised(gold))


def _tool_count(trajectory, tool: str) -> int:
  return sum(turn.tool == tool for turn in trajectory.turns)


def team_diagnostics(rollouts: Sequence[Sequence[Rollout]],
                     tasks: Sequence[Task], grader: Grader
                     ) -> dict[str, float]:
  """The figures above for rollouts [B][K] of `tasks` (B questions)."""
  return diagnostic_figures(diagnostic_counts(rollouts, tasks, grader))


def diagnostic_counts(rollouts: Sequence[Sequence[Rollout]],
                      tasks: Sequence[Task], grader: Grader
                      ) -> dict[str, int]:
  """The sums the figures are made of: sums of disjoint question ranges'
  counts (the shards several processes evaluated) make the figures of all
  their questions."""
  if len(rollouts) != len(tasks):
    raise ValueError(f"team_diagnostics: {len(rollouts)} rows of rollouts "
                     f"for {len(tasks)} tasks; expected one row per task.")
  counts: collections.Counter[str] = collections.Counter()
  for row, task in zip(rollouts, tasks):
    for rollout in row:
      hop_count = task.hops or len(task.sub_questions)
      if hop_count:
        counts[f"delegations_hop{hop_count}"] += len(rollout.subs)
        counts[f"rollouts_hop{hop_count}"] += 1
      if hop_count > 1:
        counts["multi_hop"] += 1
        counts["early"] += int(len(rollout.subs) < hop_count)
      counts["hops"] += hop_count
      counts["visits"] += sum(_tool_count(t, "visit")
                              for t in (rollout.main, *rollout.subs))
      for sub in rollout.subs:
        correct = grader.report_correct(sub.instruction, sub.answer)
        counts["subs"] += 1
        if correct is not None:
          counts["gradeable"] += 1
          counts["right"] += int(correct)
        visited = _tool_count(sub, "visit") > 0
        counts["visited"] += int(visited)
        if correct is not None and visited:
          counts["visited_gradeable"] += 1
          counts["visited_right"] += int(correct)
        page = grader.page_id(sub.instruction)
        if visited and page is not None:
          counts["visited_known"] += 1
          counts["wrong_page"] += int(page not in {
              str((t.arguments or {}).get("page")) for t in sub.turns
              if t.tool == "visit"})
        if sub.answer is not None:
          counts["reported"] += 1
          counts["searches"] += _tool_count(sub, "search")
  return dict(counts)


def diagnostic_figures(counts: dict[str, int]) -> dict[str, float]:
  """The figures of `diagnostic_counts` (summed over question ranges)."""
  c = collections.Counter(counts)
  out = {"visits_per_hop": c["visits"] / max(c["hops"], 1)}
  if c["multi_hop"]:
    out["main_early_answer"] = c["early"] / c["multi_hop"]
  hops = sorted(int(k[len("rollouts_hop"):]) for k in c
                if k.startswith("rollouts_hop"))
  for h in hops:
    out[f"main_delegations_hop{h}"] = (c[f"delegations_hop{h}"]
                                       / c[f"rollouts_hop{h}"])
  if c["subs"]:
    out["sub_gradeable"] = c["gradeable"] / c["subs"]
    if c["gradeable"]:
      out["sub_report_accuracy"] = c["right"] / c["gradeable"]
    if c["visited_gradeable"]:
      out["sub_read_accuracy"] = c["visited_right"] / c["visited_gradeable"]
    out["sub_visit_rate"] = c["visited"] / c["subs"]
    if c["visited_known"]:
      out["sub_wrong_page"] = c["wrong_page"] / c["visited_known"]
    if c["reported"]:
      out["sub_searches_per_report"] = c["searches"] / c["reported"]
  return out
