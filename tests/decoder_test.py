"""Decoder: cache consistency, RoPE, families, dtypes, config errors."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.models import build
from mgrpo_jax.models.config import ModelConfig, ModelConfigError
from mgrpo_jax.models.decoder import (KVCache, matmul,
                                      rope_inverse_frequencies)
from model_test_utils import float32_tolerance, softmax_input_scale


def tiny(family="llama", **kw):
  base = dict(family=family, vocab_size=97, hidden_size=48,
              intermediate_size=80, num_layers=2, num_heads=6, num_kv_heads=2,
              head_dim=8, rope_theta=1e4, rms_norm_eps=1e-6,
              tie_word_embeddings=False)
  base.update(kw)
  return ModelConfig(**base)


@pytest.mark.parametrize("config", [
    tiny("llama", tie_word_embeddings=True),
    tiny("qwen2", attention_bias=True),
    tiny("qwen3", qk_norm=True, head_dim=12),
])
def test_cache_in_pieces_equals_full_forward(config):
  model = build.init_model(config, seed=1)
  tokens = jax.random.randint(jax.random.key(0), (3, 9), 0, config.vocab_size)
  full = model(tokens)
  positions = jnp.broadcast_to(jnp.arange(9), (3, 9))
  cache = KVCache.zeros(config, 3, 16)
  pieces = []
  for start, stop in [(0, 4), (4, 5), (5, 9)]:
    h, cache = model.hidden_states(tokens[:, start:stop],
                                   positions[:, start:stop], cache)
    pieces.append(model.logits(h))
  # Other shapes, so other float32 rounding: 32 eps * the largest softmax
  # input (model_test_utils; measured <= 3 eps * that).
  np.testing.assert_allclose(
      jnp.concatenate(pieces, 1), full,
      atol=float32_tolerance(softmax_input_scale(model, tokens)))


def test_rows_at_different_offsets_share_one_call():
  config = tiny()
  model = build.init_model(config, seed=2)
  tokens = jax.random.randint(jax.random.key(1), (2, 8), 0, config.vocab_size)
  full = model(tokens)
  # Row 0 has seen 3 tokens, row 1 has seen 5: one call adds 2 to each.
  cache = KVCache.zeros(config, 2, 12)
  pos = jnp.broadcast_to(jnp.arange(8), (2, 8))
  _, cache = model.hidden_states(tokens[:, :5], pos[:, :5], cache)
  new_pos = jnp.array([[3, 4], [5, 6]])
  new_tok = jnp.take_along_axis(tokens, new_pos, axis=1)
  h, _ = model.hidden_states(new_tok, new_pos, cache)
  got = model.logits(h)
  want = jnp.stack([full[0, 3:5], full[1, 5:7]])
  np.testing.assert_allclose(
      got, want, atol=float32_tolerance(softmax_input_scale(model, tokens)))


def test_positions_not_pad_tokens_decide_attention():
  # The pad id appears inside the prompt; results must not depend on it.
  config = tiny()
  model = build.init_model(config, seed=3)
  a = jnp.array([[5, 2, 7, 2, 9]])
  logits = model(a)
  assert np.all(np.isfinite(logits))
  # Changing a later token never changes earlier logits (causality).
  b = a.at[0, 4].set(11)
  np.testing.assert_allclose(model(b)[0, :4], logits[0, :4], atol=1e-6)


def test_rope_llama3_scaling_matches_formula():
  config = tiny(rope_theta=5e5, head_dim=16,
                rope_llama3=(8.0, 1.0, 4.0, 64))
  got = np.asarray(rope_inverse_frequencies(config))
  base = 1.0 / (5e5 ** (np.arange(0, 16, 2) / 16))
  want = []
  for f in base:
    wavelen = 2 * math.pi / f
    if wavelen < 64 / 4.0:
      want.append(f)
    elif wavelen > 64 / 1.0:
      want.append(f / 8.0)
    else:
      smooth = (64 / wavelen - 1.0) / (4.0 - 1.0)
      want.append((1 - smooth) * f / 8.0 + smooth * f)
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_matmul_reads_narrower_weights_as_they_are():
  k1, k2 = jax.random.split(jax.random.key(0))
  x = jax.random.normal(k1, (2, 3, 8), jnp.float32)
  w = jax.random.normal(k2, (8, 5), jnp.float32)
  np.testing.assert_array_equal(matmul(x, w, jnp.float32), x @ w)
  w16 = w.astype(jnp.bfloat16)
  got = matmul(x, w16, jnp.float32)
  assert got.dtype == jnp.float32
  # x rounded to bfloat16; products of two bfloat16 values are exact in
  # float32, so only the accumulation order may differ.
  want = x.astype(jnp.bfloat16).astype(jnp.float32) @ w16.astype(jnp.float32)
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  # One bfloat16 x bfloat16 dot accumulating in float32: the weights are
  # never converted (that conversion would cost a decode step its speed).
  jaxpr = jax.make_jaxpr(lambda x, w: matmul(x, w, jnp.float32))(x, w16)
  [dot] = [e for e in jaxpr.eqns if e.primitive.name == "dot_general"]
  assert [v.aval.dtype for v in dot.invars] == [jnp.bfloat16] * 2
  assert dot.params["preferred_element_type"] == jnp.float32
  assert jaxpr.jaxpr.invars[1] in dot.invars
  # A bfloat16 model (compute and weights) keeps its bfloat16 products.
  assert matmul(x.astype(jnp.bfloat16), w16, jnp.bfloat16).dtype == (
      jnp.bfloat16)


def test_bf16_compute_is_close_to_f32():
  config = tiny()
  model32 = build.init_model(config, seed=4)
  model16 = build.init_model(config, seed=4, dtype=jnp.bfloat16)
  tokens = jnp.arange(10)[None] % config.vocab_size
  diff = jnp.abs(model16(tokens) - model32(tokens)).max()
  assert model16(tokens).dtype == jnp.float32 and float(diff) < 0.05


@pytest.mark.parametrize("kwargs, message", [
    (dict(family="gpt2"), "ModelConfig.family='gpt2'"),
    (dict(num_heads=6, num_kv_heads=4), "num_heads=6 is not a multiple of num_kv_heads=4"),
    (dict(head_dim=7), "head_dim=7: RoPE needs an even head width"),
    (dict(num_layers=0), "ModelConfig.num_layers=0: expected a positive integer"),
])
def test_bad_config(kwargs, message):
  with pytest.raises(ModelConfigError, match=message):
    tiny(**kwargs)


def test_from_hf_reads_rope_theta_and_rejects_unknown_types():
  hf = dict(model_type="llama", vocab_size=10, hidden_size=8,
            intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, rope_theta=100000.0, rms_norm_eps=1e-5,
            tie_word_embeddings=True)
  config = ModelConfig.from_hf(hf)
  assert config.rope_theta == 100000.0 and config.head_dim == 4
  assert ModelConfig.from_hf(config.to_hf()) == config
  v5 = dict(hf)
  del v5["rope_theta"]
  v5["rope_parameters"] = {"rope_type": "default", "rope_theta": 5e5}
  assert ModelConfig.from_hf(v5).rope_theta == 5e5
  with pytest.raises(ModelConfigError, match="model_type='mistral' is not supported"):
    ModelConfig.from_hf(dict(hf, model_type="mistral"), source="x/config.json")
  broken = dict(hf)
  del broken["hidden_size"]
  with pytest.raises(ModelConfigError, match="missing field 'hidden_size'"):
    ModelConfig.from_hf(broken)
