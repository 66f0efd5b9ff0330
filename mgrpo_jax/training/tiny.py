"""The tiny from-scratch team: a small BPE tokenizer and a small Llama config.

A pretrained tokenizer's 49k ids would dominate a model of a few hundred
thousand parameters (embedding, softmax and optimizer state all scale with
V), so the tiny team trains its own byte-level BPE of ~1-4k ids on the text
it will actually see: the synthetic world's pages and questions, every
agent's system prompt, and the protocol strings (tool calls, tool results,
format errors, "answer now"). It speaks ChatML like SmolLM2 (same special
tokens, same chat template), so everything downstream (chat rendering,
rollouts, SFT) treats it like any other chat tokenizer.

`tiny_team_assets` trains the tokenizer once per world and caches it under
`<cache root>/tiny_tokenizers/` (cache root: `models.loading.cache_root`);
`tiny_agents_config` sizes the team's budgets for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import tempfile
from typing import Iterable

import ml_collections
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from mgrpo_jax.agents import prompts
from mgrpo_jax.agents.protocol import (ToolSpec, parse_turn, render_answer,
                                       render_tool_call)
from mgrpo_jax.agents.rollout import DELEGATE, REASON
from mgrpo_jax.agents.team import agents_config
from mgrpo_jax.agents.tools import search_and_visit
from mgrpo_jax.data.world import World, WorldConfig, generate_world
from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.models.loading import cache_root
from mgrpo_jax.models.tokenizer import Tokenizer

# SmolLM2-Instruct's ChatML chat template (from its GGUF metadata).
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != "
    "'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named "
    "SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
# ChatML special tokens; they get the first ids (0, 1, 2).
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
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


def world_texts(world: World, *, split: str = "train") -> list[str]:
  """The world's pages (title + text) and one split's questions and
  sub-questions with their answers."""
  texts = [f"{d.title}\n{d.text}" for d in world.documents]
  for task in world.splits[split]:
    texts.append(task.question)
    texts.extend(f"{s.question} {s.answer}" for s in task.sub_questions)
  return texts


def tokenizer_texts(world: World) -> list[str]:
  """What the tiny tokenizer is trained on: the world's texts and the
  protocol texts, the latter `PROTOCOL_REPEAT` times."""
  return world_texts(world) + protocol_texts() * PROTOCOL_REPEAT


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048
                    ) -> Tokenizer:
  """A byte-level BPE with ChatML special tokens, template and eos.

  Args:
    texts: the training text (e.g. `tokenizer_texts(world)`).
    vocab_size: most ids, special tokens and the 256 byte symbols included
      (fewer when the text has fewer merges to make).
  """
  if not isinstance(vocab_size, int) or vocab_size < 256 + len(
      SPECIAL_TOKENS):
    raise ValueError(f"train_tokenizer: vocab_size={vocab_size!r}; expected "
                     f"an integer >= {256 + len(SPECIAL_TOKENS)} (the byte "
                     "alphabet and the special tokens).")
  texts = list(texts)
  if not texts:
    raise ValueError("train_tokenizer: texts is empty; expected the text the "
                     "tokenizer will see.")
  backend = tokenizers.Tokenizer(models.BPE())
  backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  backend.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
      vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
      show_progress=False)
  backend.train_from_iterator(texts, trainer)
  return Tokenizer(backend, bos_token="<|im_start|>", eos_token="<|im_end|>",
                   pad_token="<|im_end|>", unk_token="<|endoftext|>",
                   chat_template=CHAT_TEMPLATE, source="tiny tokenizer")


def tiny_model_config(vocab_size: int, *, hidden_size: int = 128,
                      num_layers: int = 2, num_heads: int = 4,
                      num_kv_heads: int = 2,
                      intermediate_size: int | None = None,
                      max_position_embeddings: int = 2048,
                      pad_vocab_to: int = 64) -> ModelConfig:
  """A small Llama: tied embeddings, RoPE theta 10000, SwiGLU 3x wide.

  Args:
    vocab_size: the tokenizer's `vocab_size`; rounded up to a multiple of
      `pad_vocab_to` (the spare ids are never produced by the tokenizer).
    hidden_size: D; head width is D / num_heads.
    num_layers, num_heads, num_kv_heads: L, H, G.
    intermediate_size: F (default 3 * D).
    max_position_embeddings: longest context the team uses.
    pad_vocab_to: multiple the vocabulary is padded to (1: no padding).
  """
  for field, value in (("vocab_size", vocab_size),
                       ("hidden_size", hidden_size), ("num_heads", num_heads),
                       ("pad_vocab_to", pad_vocab_to)):
    if not isinstance(value, int) or value < 1:
      raise ValueError(f"tiny_model_config: {field}={value!r}; expected a "
                       "positive integer.")
  if hidden_size % num_heads:
    raise ValueError(f"tiny_model_config: hidden_size={hidden_size} is not a "
                     f"multiple of num_heads={num_heads}.")
  padded = -(-vocab_size // pad_vocab_to) * pad_vocab_to
  return ModelConfig(
      family="llama", vocab_size=padded, hidden_size=hidden_size,
      intermediate_size=intermediate_size or 3 * hidden_size,
      num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
      head_dim=hidden_size // num_heads, rope_theta=10000.0, rms_norm_eps=1e-6,
      tie_word_embeddings=True,
      max_position_embeddings=max_position_embeddings)


def tokenizer_key(world_config: WorldConfig, vocab_size: int) -> str:
  """Changes with the world, the vocabulary, the prompts and the version."""
  blob = json.dumps({"world": dataclasses.asdict(world_config),
                     "vocab_size": vocab_size,
                     "protocol": protocol_texts(),
                     "version": TOKENIZER_VERSION}, sort_keys=True)
  return hashlib.sha256(blob.encode()).hexdigest()[:16]


def tiny_tokenizer_dir(world_config: WorldConfig, *, vocab_size: int = 2048,
                       cache_dir: str | os.PathLike | None = None
                       ) -> pathlib.Path:
  """Where `tiny_team_assets` keeps the tokenizer of this world."""
  return (cache_root(cache_dir) / CACHE_DIR
          / f"v{vocab_size}-{tokenizer_key(world_config, vocab_size)}")


def tiny_team_assets(world_config: WorldConfig, *,
                     cache_dir: str | os.PathLike | None = None,
                     vocab_size: int = 2048, **model_overrides
                     ) -> tuple[Tokenizer, ModelConfig]:
  """The tiny team's tokenizer (trained on the world once, then read from
  the cache) and model config (`tiny_model_config` + `model_overrides`)."""
  if not isinstance(world_config, WorldConfig):
    raise TypeError(f"tiny_team_assets: world_config must be a WorldConfig; "
                    f"got {type(world_config).__name__}.")
  directory = tiny_tokenizer_dir(world_config, vocab_size=vocab_size,
                                 cache_dir=cache_dir)
  if not (directory / "tokenizer.json").is_file():
    world = generate_world(world_config)
    tokenizer = train_tokenizer(tokenizer_texts(world), vocab_size)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=".tmp-", dir=directory.parent))
    try:
      tokenizer.save(tmp)
      try:
        os.rename(tmp, directory)  # Atomic: readers never see half a cache.
      except OSError:  # Another process won the race; use its copy.
        if not (directory / "tokenizer.json").is_file():
          raise
    finally:
      shutil.rmtree(tmp, ignore_errors=True)
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
