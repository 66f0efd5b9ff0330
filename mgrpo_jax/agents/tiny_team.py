"""The tiny from-scratch team: its tokenizer trained on the world it will see.

A pretrained tokenizer's 49k ids would dominate a model of a few hundred
thousand parameters (embedding, softmax and optimizer state all scale with
V), so the tiny team trains its own byte-level BPE of ~1-4k ids on the text
it will actually see: the synthetic world's pages and questions, every
agent's system prompt, and the protocol strings (tool calls, tool results,
format errors, "answer now"). It speaks ChatML like SmolLM2 (same special
tokens, same chat template), so everything downstream (chat rendering,
rollouts, SFT) treats it like any other chat tokenizer.

`tiny_team_assets` trains the tokenizer once per world and caches it under
`<cache root>/tiny_tokenizers/` (cache root: `runtime.cache.cache_root`;
the tokenizer and model config themselves are models/tiny.py's);
`tiny_agents_config` sizes the team's budgets for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Sequence

import ml_collections

from mgrpo_jax.agents import prompts
from mgrpo_jax.agents.protocol import (ToolSpec, parse_turn, render_answer,
                                       render_tool_call)
from mgrpo_jax.agents.rollout import DELEGATE, REASON
from mgrpo_jax.agents.team import agents_config
from mgrpo_jax.agents.tools import search_and_visit
from mgrpo_jax.data.corpus import Document
from mgrpo_jax.data.task import Task
from mgrpo_jax.data.world import World, WorldConfig, generate_world
from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.models.tiny import tiny_model_config, train_tokenizer
from mgrpo_jax.models.tokenizer import Tokenizer
from mgrpo_jax.runtime.cache import cache_root, write_entry

# Bump when the same inputs would train a different tokenizer (cache key).
TOKENIZER_VERSION = 1
CACHE_DIR = "tiny_tokenizers"  # Under the cache root.
# Copies of the protocol texts in the training text: every conversation
# repeats its system prompt, so its words are worth merging (x20 brings a
# system prompt from ~360 to ~170 ids; pages keep ~1.3 ids a word).
PROTOCOL_REPEAT = 20


def _tool_specs() -> dict[str, dict[str, ToolSpec]]:
  """Each role's tools (specs only: the search tools never run here)."""
  search = {t.spec.name: t.spec for t in search_and_visit(None)}
  return {
      prompts.MAIN_ROLE: {DELEGATE.name: DELEGATE},
      prompts.SUB_ROLE: search,
      prompts.SINGLE_ROLE: search,
      prompts.REASONER_ROLE: {},
  }


def protocol_texts() -> list[str]:
  """System prompts of every role (with and without the reason tool) and
  the protocol's strings: calls, answers, tool results, format errors."""
  texts = []
  roles = _tool_specs()
  for style in prompts.PROMPT_STYLES:
    for role, specs in roles.items():
      texts.append(prompts.system_prompt(role, specs, style))
    texts.append(prompts.system_prompt(
        prompts.MAIN_ROLE, {DELEGATE.name: DELEGATE, REASON.name: REASON},
        style))
  all_specs = {**roles[prompts.SUB_ROLE], DELEGATE.name: DELEGATE,
               REASON.name: REASON}
  for spec in all_specs.values():
    example = {a: "..." for a in spec.required}
    texts.append(render_tool_call(spec.name, example))
    texts.append(prompts.tool_result(spec.name, "..."))
  texts.append(render_answer("..."))
  texts.append(prompts.ANSWER_NOW)
  for bad in ("no action", "<tool_call>{bad json</tool_call>",
              '<tool_call>{"name": "fly", "arguments": {}}</tool_call>',
              '<tool_call>{"name": "search", "arguments": {}}</tool_call>',
              "<answer>a</answer><answer>b</answer>", "<tool_call>open"):
    texts.append(prompts.format_error(parse_turn(bad, all_specs).error))
  return texts


def data_texts(documents: Sequence[Document], tasks: Sequence[Task]
               ) -> list[str]:
  """Pages (title + text), then each question and its sub-questions with
  their answers: what the tiny tokenizer learns its words from."""
  texts = [f"{d.title}\n{d.text}" for d in documents]
  for task in tasks:
    texts.append(task.question)
    texts.extend(f"{s.question} {s.answer}" for s in task.sub_questions)
  return texts


def world_texts(world: World, *, split: str = "train") -> list[str]:
  """The world's pages (title + text) and one split's questions and
  sub-questions with their answers."""
  return data_texts(world.documents, world.splits[split])


def tokenizer_texts(world: World) -> list[str]:
  """What the tiny tokenizer is trained on: the world's texts and the
  protocol texts, the latter `PROTOCOL_REPEAT` times."""
  return world_texts(world) + protocol_texts() * PROTOCOL_REPEAT


def with_protocol(texts: Sequence[str]) -> list[str]:
  """`texts` and the protocol texts, `PROTOCOL_REPEAT` times: what the tiny
  tokenizer of data from files (or of demonstration worlds) learns from."""
  return list(texts) + protocol_texts() * PROTOCOL_REPEAT


def tokenizer_key(world_config: WorldConfig, vocab_size: int) -> str:
  """Changes with the world, the vocabulary, the prompts and the version."""
  blob = json.dumps({"world": dataclasses.asdict(world_config),
                     "vocab_size": vocab_size,
                     "protocol": protocol_texts(),
                     "version": TOKENIZER_VERSION}, sort_keys=True)
  return hashlib.sha256(blob.encode()).hexdigest()[:16]


def texts_tokenizer_key(texts: Sequence[str], vocab_size: int) -> str:
  """The key of a tokenizer trained on `texts` (data from files): changes
  with the texts, the vocabulary, the prompts and the version."""
  blob = json.dumps({"texts": hashlib.sha256(
      "\x00".join(texts).encode()).hexdigest(), "vocab_size": vocab_size,
                     "protocol": protocol_texts(),
                     "version": TOKENIZER_VERSION}, sort_keys=True)
  return "t" + hashlib.sha256(blob.encode()).hexdigest()[:15]


def tiny_tokenizer_dir(world_config: WorldConfig | None, *,
                       vocab_size: int = 2048,
                       cache_dir: str | os.PathLike | None = None,
                       texts: Sequence[str] | None = None) -> pathlib.Path:
  """Where `tiny_team_assets` keeps the tokenizer of this world (or of
  `texts`)."""
  key = (tokenizer_key(world_config, vocab_size) if texts is None
         else texts_tokenizer_key(texts, vocab_size))
  return cache_root(cache_dir) / CACHE_DIR / f"v{vocab_size}-{key}"


def tiny_team_assets(world_config: WorldConfig | None, *,
                     cache_dir: str | os.PathLike | None = None,
                     vocab_size: int = 2048,
                     texts: Sequence[str] | None = None, **model_overrides
                     ) -> tuple[Tokenizer, ModelConfig]:
  """The tiny team's tokenizer (trained once, then read from the cache) and
  model config (`tiny_model_config` + `model_overrides`). It learns from
  the world's texts, or from `texts` (data from files: `data_texts`), and
  the protocol's."""
  if texts is None and not isinstance(world_config, WorldConfig):
    raise TypeError(f"tiny_team_assets: world_config must be a WorldConfig; "
                    f"got {type(world_config).__name__}.")
  directory = tiny_tokenizer_dir(world_config, vocab_size=vocab_size,
                                 cache_dir=cache_dir, texts=texts)
  if not (directory / "tokenizer.json").is_file():
    corpus = (tokenizer_texts(generate_world(world_config)) if texts is None
              else with_protocol(texts))
    tokenizer = train_tokenizer(corpus, vocab_size)
    write_entry(directory, tokenizer.save,
                is_complete=lambda d: (d / "tokenizer.json").is_file())
  tokenizer = Tokenizer.load(directory)
  return tokenizer, tiny_model_config(tokenizer.vocab_size, **model_overrides)


def tiny_agents_config(context_tokens: int = 1024) -> ml_collections.ConfigDict:
  """`agents_config()` sized for the tiny team: a short context (every
  oracle trajectory of a 4-hop world fits in 1024 ids), short turns, two
  search hits, greedy decoding."""
  config = agents_config()
  config.temperature = 0.0
  config.search_k = 2
  config.visit_chars = 600
  config.answer_reserve = 48
  for side in ("main", "sub"):
    config[side].context_tokens = context_tokens
    config[side].max_new_tokens = 96
    config[side].rows = 16
  return config
