"""The tiny model family: a byte-level BPE tokenizer trained on given text
(ChatML, like SmolLM2) and a small Llama config.

A pretrained tokenizer's 49k ids would dominate a model of a few hundred
thousand parameters (embedding, softmax and optimizer state all scale with
V), so a tiny model trains its own tokenizer of ~1-4k ids on the text it will
see (agents/tiny_team.py gives it the world's pages and the protocol). It
speaks ChatML like SmolLM2 (same special tokens, same chat template), so
everything downstream treats it like any other chat tokenizer.
"""

from __future__ import annotations

from typing import Iterable

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from mgrpo_jax.models.config import ModelConfig
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
