"""Tiny configs, random weights and a tiny tokenizer shared by model tests."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from mgrpo_jax.models import ModelConfig, Tokenizer
from mgrpo_jax.models.build import expected_shapes
from mgrpo_jax.models.decoder import (attention, finish_layer,
                                      layer_param_names, project_qkv,
                                      rms_norm, rope_inverse_frequencies)
from mgrpo_jax.models.tiny import CHAT_TEMPLATE  # SmolLM2's ChatML.

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


# ------------------------------------------------------ float32 tolerances
#
# Two float32 evaluations of the same model differ when they round in a
# different order: another batch, window or prompt shape makes XLA block its
# GEMMs and reductions differently, and so does another CPU (AVX2 vs
# AVX-512/AMX) or another program (KV-cache decode vs full forward). Each
# rounding is relative (eps/2 of the value rounded), so the difference
# scales with the magnitudes involved, not with the outputs compared:
#
# * Softmax inputs set it. A softmax is shift-invariant, so an absolute
#   error d in its inputs (attention scores, output logits) moves its
#   log-outputs by <= 2d whatever their size, and a rounded input of
#   magnitude S carries d ~ eps * S. Attention scores can dwarf the logits:
#   the engine tests' decoder (weights x10) has scores ~1e3 but logits ~6,
#   and its batch-1 vs batch-3 log-prob spreads reach 430 eps * max|logit|
#   but only 1.7 eps * S.
# * So S = max |x| over every softmax input of a full forward of the
#   compared tokens (all layers' attention scores and the logits), and a
#   log-prob's own rounding adds eps * |logp| (the rtol).
# * FLOAT32_FACTOR = 32 covers what multiplies eps * S (cancellation in the
#   length-Dh / length-D dot products behind S, a few roundings per layer,
#   the softmax's 2x): ~10x the largest spread measured, <= 3 eps * S, over
#   batch 1/3/4/7/8/32, KV-cache pieces vs full forward and engine decode vs
#   naive forward, with XLA's default codegen and --xla_cpu_max_isa=SSE4_2 /
#   AVX2, --xla_cpu_prefer_vector_width=512, --xla_cpu_use_xnnpack=true.
#
# On the engine tests' decoder a position off by one or a mask letting a
# query see one slot too many or too few moves log-probs by > 0.1, a 1%
# temperature error by 0.02; 32 eps * S is ~4e-3 there.

EPS_F32 = float(np.finfo(np.float32).eps)  # 2**-23 ~ 1.19e-7
FLOAT32_FACTOR = 32


def softmax_input_scale(model, tokens_BxT) -> float:
  """max |x| over the softmax inputs of a full forward of model(tokens):
  every layer's (visible) attention scores and the output logits.

  Mirrors `Decoder.hidden_states` without a cache, layer by layer, to see
  the scores; only a magnitude is taken from it.
  """
  c, dt = model.config, model.dtype
  tokens = jnp.asarray(tokens_BxT, jnp.int32)
  b, t = tokens.shape
  positions = jnp.broadcast_to(jnp.arange(t), (b, t))
  visible = positions[:, None, :] <= positions[:, :, None]
  inv_freq = rope_inverse_frequencies(c)
  h = model.embed[...].astype(dt)[tokens]
  scale = 0.0
  for i in range(c.num_layers):
    lp = {n: getattr(model, n)[...][i] for n in layer_param_names(c)}
    q, k, v = project_qkv(c, dt, lp, h, positions, inv_freq)
    scores = jnp.einsum("btgrd,bsgd->bgrts", q, k,
                        preferred_element_type=jnp.float32)
    scores = jnp.where(visible[:, None, None], scores * c.head_dim ** -0.5, 0)
    scale = max(scale, float(jnp.abs(scores).max()))
    h = finish_layer(c, dt, lp, h, attention(
        q, jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2), visible, dt))
  logits = model.logits(rms_norm(h, model.final_norm[...], c.rms_norm_eps))
  return max(scale, float(jnp.abs(logits).max()))


def float32_tolerance(scale: float, factor: float = FLOAT32_FACTOR) -> float:
  """atol = factor * eps_f32 * scale (see the comment above)."""
  return factor * EPS_F32 * float(scale)


def logprob_tolerance(model, sequences) -> dict[str, float]:
  """assert_allclose kwargs for log-probs of `sequences` (token id lists,
  prompt + generated) computed by two float32 programs or batch shapes:
  atol from the largest softmax input of their full forwards, rtol for
  each log-prob's own rounding."""
  scale = max(softmax_input_scale(model, [list(s)]) for s in sequences)
  return dict(atol=float32_tolerance(scale),
              rtol=FLOAT32_FACTOR * EPS_F32)
