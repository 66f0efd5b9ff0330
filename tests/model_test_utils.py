"""Tiny configs, random weights and a tiny tokenizer shared by model tests."""

from __future__ import annotations

import dataclasses

import numpy as np
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from mgrpo_jax.models import ModelConfig, Tokenizer
from mgrpo_jax.models.build import expected_shapes
from mgrpo_jax.training.tiny import CHAT_TEMPLATE  # SmolLM2's ChatML.

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CORPUS = [
    "What is the capital of France? The capital of France is Paris.",
    "def f(x):\n    return x ** 2  # squares 12345",
    "naïve café – 日本語 🤗 multi-hop questions need sub-agents.",
] * 20
VOCAB = 320  # model vocab of the tiny configs (>= the tiny tokenizer's)


def tiny_tokenizer() -> Tokenizer:
  """A byte-level BPE (< VOCAB ids) with SmolLM2's special tokens/template."""
  backend = tokenizers.Tokenizer(models.BPE())
  backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  backend.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
      vocab_size=VOCAB - 16, special_tokens=list(SPECIALS),
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
      show_progress=False)
  backend.train_from_iterator(CORPUS, trainer)
  return Tokenizer(backend, bos_token="<|im_start|>", eos_token="<|im_end|>",
                   pad_token="<|im_end|>", unk_token="<|endoftext|>",
                   chat_template=CHAT_TEMPLATE)


def tiny_config(family: str = "llama", **overrides) -> ModelConfig:
  """hidden 64, 2 layers, 4 heads / 2 kv heads, vocab VOCAB."""
  config = ModelConfig(
      family=family, vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
      num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
      rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
      attention_bias=family == "qwen2", qk_norm=family == "qwen3",
      max_position_embeddings=256)
  return dataclasses.replace(config, **overrides)


def random_arrays(config: ModelConfig, seed: int = 0
                  ) -> dict[str, np.ndarray]:
  """Random float32 parameters: norm weights near 1, the rest N(0, 0.1)."""
  rng = np.random.default_rng(seed)
  out = {}
  for name, shape in expected_shapes(config).items():
    value = 0.1 * rng.standard_normal(shape)
    if "norm" in name:
      value += 1.0
    out[name] = value.astype(np.float32)
  return out
