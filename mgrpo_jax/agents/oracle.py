"""An oracle policy: plays the agents on the synthetic world from each task's
gold decomposition, through the real rollout controller (for SFT data).

  main    delegates the sub-questions in order, each with the entity the
          previous report named ("Which company does Nuko Besho work
          for?"), then answers with the last report's answer;
  sub     searches the entity the task names, visits that entity's page
          (its id read from the search results), and reports
          "<answer>. Evidence: <the page's sentence>";
  single  one agent does both: search and visit for each step, then answers.

`OraclePolicy` implements the controller's `Policy` protocol (start /
extend / generate_turn / release) like `sampling.Engine`, but writes each
turn with Python: it reads the conversation's user message (the question or
the delegated task) and the tool results the controller sent back, and looks
the task up in a `Knowledge` built from the TaskSet (question -> Task,
sub-question -> gold answer). A delegated task that is not a gold
sub-question (a mistake upstream) is parsed with the world's relation
templates and answered from the visited page.

Noise: with probability `noise` per turn the oracle makes one controlled
mistake (`MISTAKES`): a wrong entity in a delegated task, a wrong answer, or
a malformed turn (unclosed tag, broken JSON, missing tags), from which it
recovers by repeating the action on the controller's format error. Noise is
drawn from an explicit seed, so the same seed gives the same demonstrations.
configs/default.py sets `sft.noise` to 0: wrong names teach the tiny model
that names are not copied.

Early answers: with probability `early_answer` per multi-hop question, the
main agent answers right after its first report (the single agent after its
first hop) with that hop's answer, an intermediate entity: a planner that
has not learned to decompose. Unlike `noise`, this is one decision per
conversation, and it writes no wrong name into any turn.

Lazy reports: with probability `lazy_report` per hop, the sub-agent (the
single agent, for that hop) answers from the search results without
visiting the page: the fact if a snippet states it in full, else "unknown"
(snippets are cut short, so they rarely do): a sub-agent that has not
learned that a report must come from the page. Also one decision per hop,
with no wrong name written.

agents/demonstrations.py runs a whole TaskSet through a team of oracles and
returns the trajectories (token ids + loss mask: exactly what SFT trains on).
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any, Sequence

import jax
import numpy as np

from mgrpo_jax.agents import prompts
from mgrpo_jax.agents.protocol import (ANSWER_CLOSE, CALL_CLOSE, EVIDENCE,
                                       render_answer, render_tool_call,
                                       report_answer)
from mgrpo_jax.agents.rollout import DELEGATE
from mgrpo_jax.data.task import SubQuestion, Task, TaskSet
from mgrpo_jax.data.facts import entity_of, parse_step, read_fact
from mgrpo_jax.sampling.engine import Result
from mgrpo_jax.sampling.sampling_params import SamplingParams

PLAYS = ("main", "sub", "single")
# Controlled mistakes, as counted in `OraclePolicy.mistakes`.
MISTAKES = ("wrong_entity", "wrong_answer", "malformed", "early_answer",
            "lazy_report")
UNKNOWN = "unknown"  # What the oracle answers when it found nothing.

_TOOL_RESULT = re.compile(
    r'<tool_response name="([^"]+)">\n(.*)\n</tool_response>', re.S)
_HIT = re.compile(r"^\[([^\]]+)\] (.*?): ", re.M)
_KIND = re.compile(r"^(.+?) is an? (\w+)\.")
_SENTENCE = re.compile(r"[^.\n]+\.")
_SENTINELS = ("\u2063ORACLE_SYSTEM\u2063", "\u2063ORACLE_USER\u2063")


def gold_steps(task: Task, pages: dict[str, str]) -> tuple[SubQuestion, ...]:
  """What a file's record says about playing `task` (`pages`: text by page
  id): its decomposition (MuSiQue: each step's question, answer and, where
  the record names it, supporting page), else one step, the question itself,
  answered from a supporting page (HotpotQA's supporting facts: the first of
  them that states the answer). A ValueError names the task and what it
  lacks."""
  if task.sub_questions:
    return task.sub_questions
  supporting = tuple(task.metadata.get("supporting_doc_ids", ()))
  if not supporting:
    raise ValueError(
        f"task {task.task_id!r} ({task.source}) has no question_decomposition "
        "and no supporting_facts; gold demonstrations (config.sft."
        "demonstrations='gold') need one of them (MuSiQue, HotpotQA), or "
        "pass a demonstration JSONL.")
  stating = [d for d in supporting
             if any(a.lower() in pages.get(d, "").lower()
                    for a in task.answers)]
  return (SubQuestion(task.question, task.answer,
                      (stating or supporting)[0]),)


class Knowledge:
  """What the oracle knows of a TaskSet: tasks by question, gold answers by
  sub-question, and entity names by kind (for controlled mistakes).

  `gold=False` plays the synthetic world (searches the entity a sub-question
  names, visits the hit titled so); `gold=True` plays any data from what its
  records carry (`gold_steps`): searches the delegated sub-question, visits
  the step's supporting page when the search found it, else reports
  "unknown" (`misses` counts those). `reads=True`: a step's answer is what
  the visited page states, when it states one (a scripted reader; default:
  the gold answer, what a model that memorised the world would say)."""

  def __init__(self, taskset: TaskSet, *, gold: bool = False,
               reads: bool = False):
    self.gold = gold
    self.reads = reads
    self.tasks: dict[str, Task] = {t.question: t for t in taskset.tasks}
    self.plans: dict[str, tuple[SubQuestion, ...]] = {}
    self.steps: dict[str, SubQuestion] = {}
    pages = {d.doc_id: d.text for d in taskset.documents}
    for task in taskset.tasks:
      if gold:
        plan = gold_steps(task, pages)
      elif task.sub_questions:
        plan = task.sub_questions
      else:
        raise ValueError(f"Knowledge: task {task.task_id!r} has no "
                         "sub_questions; the oracle needs a gold "
                         "decomposition (synthetic world tasks have one; "
                         "gold=True plays from supporting pages).")
      self.plans[task.question] = plan
      for step in plan:
        self.steps[step.question] = step
    self.misses = 0  # Gold steps whose search did not find their page.
    self.kind: dict[str, str] = {}
    for doc in taskset.documents:
      match = _KIND.match(doc.text)
      self.kind[doc.title] = match.group(2) if match else ""
    self.names_of_kind = collections.defaultdict(list)
    for name, kind in sorted(self.kind.items()):
      self.names_of_kind[kind].append(name)

  def task(self, question: str) -> Task:
    if question not in self.tasks:
      raise ValueError(f"OraclePolicy: no task has the question "
                       f"{question!r}; expected a question of the TaskSet "
                       "the oracle was built from.")
    return self.tasks[question]

  def plan(self, question: str) -> tuple[SubQuestion, ...]:
    """The steps the oracle plays for a question."""
    self.task(question)
    return self.plans[question]

  def query(self, task_text: str) -> str:
    """What the sub-agent searches for a delegated step."""
    return task_text if self.gold else entity_of(task_text)

  def page(self, task_text: str, search_output: str) -> str | None:
    """The page id to visit from a step's search results (None: none)."""
    if not self.gold:
      return pick_page(search_output, entity_of(task_text))
    step = self.steps.get(task_text)
    hits = [doc_id for doc_id, _ in _HIT.findall(search_output)]
    if step is None or not step.doc_id:
      return hits[0] if hits else None
    if step.doc_id in hits:
      return step.doc_id
    self.misses += 1
    return None

  def other_name(self, name: str, rng: np.random.Generator) -> str:
    """A different entity of the same kind (any other name if none)."""
    pool = [n for n in self.names_of_kind.get(self.kind.get(name, ""), ())
            if n != name] or [n for n in self.kind if n != name]
    return pool[int(rng.integers(len(pool)))] if pool else f"Not {name}"

  def answer(self, task_text: str, page: str | None) -> str | None:
    """The gold answer of a sub-question; else what the page states (with
    `reads`, what the page states first)."""
    parsed = parse_step(task_text)
    stated = (read_fact(*parsed, page)
              if parsed is not None and page is not None else None)
    if self.reads and stated is not None:
      return stated
    if task_text in self.steps:
      return self.steps[task_text].answer
    return stated


def step_texts(steps: Sequence[SubQuestion], answers: Sequence[str]
               ) -> list[str]:
  """The sub-questions to ask, the entity of each replaced by the answer
  found for the previous one (gold answers give the gold sub-questions)."""
  out = [steps[0].question]
  for i in range(1, min(len(answers) + 1, len(steps))):
    out.append(steps[i].question.replace(steps[i - 1].answer, answers[i - 1]))
  return out


def evidence(answer: str, entity: str, page: str | None) -> str:
  """The page's first sentence naming the entity and the answer, else the
  first naming the answer (or "")."""
  sentences = [s.strip() for s in _SENTENCE.findall(page or "")
               if answer in s]
  both = [s for s in sentences if entity in s]
  return (both or sentences or [""])[0]


def pick_page(search_output: str, entity: str) -> str | None:
  """The id of the search hit titled `entity`, else of the first hit."""
  hits = _HIT.findall(search_output)
  for doc_id, title in hits:
    if title.strip().lower() == entity.strip().lower():
      return doc_id
  return hits[0][0] if hits else None


@dataclasses.dataclass
class _State:
  """A conversation as the oracle sees it."""
  tokens: list[int]
  seen: int = 0  # Ids already read (the prompt, then up to the last turn).
  user: str | None = None  # The first user message (question / task).
  # (tool, output) of each tool result received, in order.
  results: list[tuple[str, str]] = dataclasses.field(default_factory=list)
  answer_now: bool = False  # The last message asked for the answer now.
  answer_after: int | None = None  # Main / single: answer after this many hops.
  lazy: frozenset[int] = frozenset()  # Hops answered from the search results.


class OraclePolicy:
  """A `Policy` (see agents/rollout.py) that plays one agent as the oracle.

  Args:
    tokenizer: the agents' tokenizer (a ChatML or any chat template).
    knowledge: `Knowledge` of the TaskSet being rolled out.
    plays: "main" (delegates), "sub" (searches for a delegated task) or
      "single" (searches for the question itself).
    noise: chance in [0, 1] of a controlled mistake per turn.
    early_answer: chance in [0, 1] that the main (or single) agent answers
      a multi-hop question after its first hop (0 when it plays "sub").
    lazy_report: chance in [0, 1] per hop that the sub (or single) agent
      answers from the search results without visiting (0 when it plays "main").
    rng: the noise's random generator, or a seed for one.
    max_conversations, cache_len: row and context budgets, as an Engine's.
  """

  def __init__(self, tokenizer: Any, knowledge: Knowledge, plays: str, *,
               noise: float = 0.0, early_answer: float = 0.0,
               lazy_report: float = 0.0,
               rng: np.random.Generator | int = 0,
               max_conversations: int = 64, cache_len: int = 4096):
    if plays not in PLAYS:
      raise ValueError(f"OraclePolicy: plays={plays!r}; expected one of "
                       f"{list(PLAYS)}.")
    for name, share in (("noise", noise), ("early_answer", early_answer),
                        ("lazy_report", lazy_report)):
      if not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise ValueError(f"OraclePolicy: {name}={share!r}; expected a "
                         "number in [0, 1].")
    self.tokenizer, self.knowledge, self.plays = tokenizer, knowledge, plays
    if early_answer and plays == "sub":
      raise ValueError(f"OraclePolicy: early_answer={early_answer} with "
                       "plays='sub'; a sub-agent answers one hop (expected "
                       "0).")
    if lazy_report and plays == "main":
      raise ValueError(f"OraclePolicy: lazy_report={lazy_report} with "
                       "plays='main'; the planner never searches (expected "
                       "0).")
    self.noise, self.early_answer = float(noise), float(early_answer)
    self.lazy_report = float(lazy_report)
    self.rng = np.random.default_rng(rng)
    self.max_conversations, self.cache_len = max_conversations, cache_len
    self.mistakes = collections.Counter()  # Mistakes made, by kind.
    self._convs: dict[int, _State] = {}
    self._next = 0
    chat = tokenizer.apply_chat_template(
        [{"role": "system", "content": _SENTINELS[0]},
         {"role": "user", "content": _SENTINELS[1]}],
        add_generation_prompt=True)
    system_end = chat.index(_SENTINELS[0]) + len(_SENTINELS[0])
    user_start = chat.index(_SENTINELS[1])
    self._user_open = chat[system_end:user_start]
    self._user_close = chat[user_start + len(_SENTINELS[1]):]

  # ----------------------------------------------------------- Policy API

  @property
  def num_free(self) -> int:
    return self.max_conversations - len(self._convs)

  def start(self, prompt_tokens: Sequence[int]) -> int:
    if self.num_free <= 0:
      raise ValueError(f"OraclePolicy.start: all max_conversations="
                       f"{self.max_conversations} rows are in use.")
    conv_id = self._next
    self._next += 1
    self._convs[conv_id] = _State([int(t) for t in prompt_tokens])
    return conv_id

  def extend(self, conv_id: int, tokens: Sequence[int]) -> None:
    state = self._convs[conv_id]
    if len(state.tokens) + len(tokens) > self.cache_len:
      raise ValueError(f"OraclePolicy.extend: conversation {conv_id} would "
                       f"hold more than cache_len={self.cache_len} ids.")
    state.tokens.extend(int(t) for t in tokens)

  def release(self, conv_id: int) -> None:
    del self._convs[conv_id]

  def generate_turn(self, conv_ids: Sequence[int], params: SamplingParams,
                    key: jax.Array, *, decode_fn: Any = None) -> list[Result]:
    """One oracle turn per conversation, cut like the engine's output: at
    the first stop string (no end-of-turn id), else ended by eos."""
    del key, decode_fn  # The oracle's randomness is its own rng.
    out = []
    for conv_id in conv_ids:
      state = self._convs[conv_id]
      self._read(state)
      text = self._turn(state)
      ends = [text.find(s) + len(s) for s in params.stop_strings if s in text]
      if ends:
        ids = self.tokenizer.encode(text[:min(ends)])
      else:
        ids = self.tokenizer.encode(text) + [self.tokenizer.eos_id]
      budget = min(params.max_new_tokens, self.cache_len - len(state.tokens))
      finish = "stop" if len(ids) <= budget else "length"
      ids = ids[:max(budget, 0)]
      state.tokens.extend(ids)
      state.seen = len(state.tokens)
      out.append(Result(ids, np.zeros(len(ids), np.float32), finish,
                        conv_id))
    return out

  # ------------------------------------------------------------- reading

  def _read(self, state: _State) -> None:
    """Takes in what arrived since the last turn: the prompt's user
    message, or the tool result / error the controller sent."""
    text = self.tokenizer.decode(state.tokens[state.seen:])
    if state.user is None:
      if not text.endswith(self._user_close) or self._user_open not in text:
        raise ValueError("OraclePolicy: the prompt does not end with the "
                         "user message and the generation prompt (an "
                         "agent's first_turn_prefix is not supported).")
      begin = text.index(self._user_open) + len(self._user_open)
      state.user = text[begin:len(text) - len(self._user_close)]
      if (self.early_answer
          and len(self.knowledge.plan(state.user)) > 1
          and self.rng.random() < self.early_answer):
        state.answer_after = 1
        self.mistakes["early_answer"] += 1
      if self.lazy_report:
        hops = (1 if self.plays == "sub"
                else len(self.knowledge.plan(state.user)))
        state.lazy = frozenset(
            h for h in range(hops) if self.rng.random() < self.lazy_report)
        self.mistakes["lazy_report"] += len(state.lazy)
      return
    results = _TOOL_RESULT.findall(text)
    if results:
      state.results.append(results[-1])
    state.answer_now = prompts.ANSWER_NOW in text

  # ------------------------------------------------------------- writing

  def _mistake(self, *kinds: str) -> str | None:
    """A mistake kind with probability `noise`, else None."""
    if self.noise and self.rng.random() < self.noise:
      kind = kinds[int(self.rng.integers(len(kinds)))]
      self.mistakes[kind] += 1
      return kind
    return None

  def _malformed(self, action: str) -> str:
    """`action` broken so that the protocol parser rejects it."""
    ways = ["unclosed", "untagged"] + (["json"] if "}" in action else [])
    way = ways[int(self.rng.integers(len(ways)))]
    if way == "unclosed":
      return action.replace(CALL_CLOSE, "").replace(ANSWER_CLOSE, "")
    if way == "json":
      cut = action.rindex("}")
      return action[:cut] + action[cut + 1:]
    return re.sub(r"</?(tool_call|answer)>", "", action)

  def _call(self, thought: str, name: str, **arguments: str) -> str:
    action = render_tool_call(name, arguments)
    if self._mistake("malformed"):
      action = self._malformed(action)
    return f"{thought} {action}"

  def _final(self, thought: str, answer: str, evidence_text: str = "") -> str:
    """The final answer (a sub-agent's report: answer, then evidence)."""
    kind = self._mistake("wrong_answer", "malformed")
    if kind == "wrong_answer":
      answer = self.knowledge.other_name(answer, self.rng)
      evidence_text = ""
    action = render_answer(f"{answer}{EVIDENCE}{evidence_text}"
                           if evidence_text else answer)
    if kind == "malformed":
      action = self._malformed(action)
    return f"{thought} {action}"

  def _turn(self, state: _State) -> str:
    return {"main": self._main_turn, "sub": self._sub_turn,
            "single": self._single_turn}[self.plays](state)

  def _main_turn(self, state: _State) -> str:
    plan = self.knowledge.plan(state.user)
    reports = [report_answer(text) for name, text in state.results
               if name == DELEGATE.name]
    if (state.answer_now or len(reports) >= len(plan)
        or len(reports) == state.answer_after):
      answer = reports[-1] if reports else UNKNOWN
      return self._final("The reports answer the question.", answer)
    step = step_texts(plan, reports)[len(reports)]
    kind = self._mistake("wrong_entity", "malformed")
    if kind == "wrong_entity":
      entity = entity_of(step)
      step = step.replace(entity, self.knowledge.other_name(entity, self.rng))
    action = render_tool_call(DELEGATE.name,
                              {next(iter(DELEGATE.required)): step})
    if kind == "malformed":
      action = self._malformed(action)
    return f"I delegate the next step. {action}"

  def _research(self, task_text: str, results: Sequence[tuple[str, str]],
                answer_now: bool, lazy: bool = False
                ) -> str | tuple[str, str | None]:
    """One one-hop question: the next turn (search, then visit), or
    (answer, page read or None) when it is time to answer. `lazy`: answer
    from the search results, without the visit."""
    outputs = dict(results)
    if "visit" in outputs:
      page = outputs["visit"]
      return self.knowledge.answer(task_text, page) or UNKNOWN, page
    if answer_now:
      return self.knowledge.answer(task_text, None) or UNKNOWN, None
    if "search" not in outputs:
      return self._call("I search for it.", "search",
                        query=self.knowledge.query(task_text))
    if lazy:
      parsed = parse_step(task_text)
      snippet_fact = read_fact(*parsed, outputs["search"]) if parsed else None
      return snippet_fact or UNKNOWN, None
    page_id = self.knowledge.page(task_text, outputs["search"])
    if page_id is None:
      return UNKNOWN, None
    return self._call("I read its page.", "visit", page=page_id,
                      goal=task_text)

  def _sub_turn(self, state: _State) -> str:
    turn = self._research(state.user, state.results, state.answer_now,
                          lazy=0 in state.lazy)
    if isinstance(turn, str):
      return turn
    answer, page = turn
    return self._final("I found the answer.", answer,
                       evidence(answer, entity_of(state.user), page))

  def _single_turn(self, state: _State) -> str:
    """Search and visit for each step in turn; a visit ends a step (a
    search ends a lazy one)."""
    plan = self.knowledge.plan(state.user)
    answers, current = [], []
    for name, text in state.results:
      current.append((name, text))
      lazy = len(answers) in state.lazy
      if name == "visit" or (lazy and name == "search"):
        step = step_texts(plan, answers)[len(answers)]
        if name == "visit":
          answers.append(self.knowledge.answer(step, text) or UNKNOWN)
        else:
          parsed = parse_step(step)
          answers.append((read_fact(*parsed, text) if parsed else None)
                         or UNKNOWN)
        current = []
    if (len(answers) < len(plan) and not state.answer_now
        and len(answers) != state.answer_after):
      step = step_texts(plan, answers)[len(answers)]
      turn = self._research(step, current, False)
      if isinstance(turn, str):
        return turn
      answers.append(turn[0])  # The search found no page: give up.
    return self._final("I found the answer.",
                       answers[-1] if answers else UNKNOWN)
