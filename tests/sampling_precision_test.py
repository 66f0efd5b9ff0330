"""A bfloat16-weights sampler and its log-prob gap to the float32 model."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import build
from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.sampling import Engine, SamplingParams, forward
from mgrpo_jax.sampling.precision import logp_gap

CONFIG = ModelConfig(family="llama", vocab_size=128, hidden_size=64,
                     intermediate_size=128, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=16, rope_theta=1e4,
                     rms_norm_eps=1e-6, tie_word_embeddings=False)
SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=24)


@functools.lru_cache(maxsize=None)
def _model():
  """A random decoder with weights x3: log-probs spread (std ~0.5) as a
  trained model's do, so a wrong position would show (scored one token
  off, the gap is ~0.2 mean, ~1 max)."""
  model = build.init_model(CONFIG, seed=0)
  state = nnx.split(model)[1]
  nnx.update(model, jax.tree.map(lambda x: x * 3 if x.ndim > 1 else x,
                                 state))
  return model


def _engine(**kwargs):
  return Engine(_model(), max_conversations=4, cache_len=64, chunk_steps=8,
                min_window=32, min_prompt_bucket=16, **kwargs)


def _prompts():
  rng = np.random.default_rng(0)
  return [rng.integers(0, CONFIG.vocab_size, n).tolist() for n in (5, 11, 8)]


def test_bfloat16_weights_sample_a_policy_near_the_float32_model():
  prompts = _prompts()
  exact = _engine()
  assert exact.weights_dtype == "float32"
  same = logp_gap(_model(), prompts,
                  exact.generate(prompts, SAMPLED, jax.random.key(0)))
  assert same["tokens"] == 3 * 24
  assert same["max_abs"] < 1e-4  # The same policy, float32 rounding apart.
  engine = _engine(weights_dtype=jnp.bfloat16)
  assert engine.weights_dtype == "bfloat16"
  assert engine._weights.layers[0]["wq"].dtype == jnp.bfloat16
  assert engine._weights.layers[0]["attn_norm"].dtype == jnp.float32
  assert engine._weights.lm_head.dtype == jnp.bfloat16
  gap = logp_gap(_model(), prompts,
                 engine.generate(prompts, SAMPLED, jax.random.key(0)))
  # Rounded weights: another policy, but a near one (measured: mean 4.7e-3,
  # max 2.4e-2; bfloat16 rounding is the same on every CPU).
  assert 1e-3 < gap["mean_abs"] < 3e-2
  assert gap["max_abs"] < 0.15
  # New weights are rounded too (same structure: no new program).
  splits = engine.trace_counts["split"]
  engine.update_weights(_model(), version=3)
  assert engine.weights_dtype == "bfloat16"
  assert engine.trace_counts["split"] == splits


def test_a_tied_head_is_copied_untransposed_when_rounded():
  """The rounded copy of a tied embedding's head is a [D, V] matrix (a
  bfloat16 dot with the transposed embedding is ~8x slower on CPU)."""
  import dataclasses
  tied = build.init_model(dataclasses.replace(CONFIG,
                                              tie_word_embeddings=True))
  assert forward.split_weights(tied).lm_head is None  # float32: shared.
  rounded = forward.split_weights(tied, jnp.bfloat16)
  assert rounded.lm_head.shape == (CONFIG.hidden_size, CONFIG.vocab_size)
  np.testing.assert_array_equal(
      rounded.lm_head, tied.embed[...].T.astype(jnp.bfloat16))
  h = jnp.ones((2, CONFIG.hidden_size))
  np.testing.assert_allclose(forward.logits(jnp.float32, rounded, h),
                             forward.logits(jnp.float32,
                                            forward.split_weights(tied), h),
                             atol=0.05)


@pytest.mark.parametrize("bad", ["float16", "int8", 3, "bf16"])
def test_an_unsupported_weights_dtype_is_refused_before_any_compute(bad):
  with pytest.raises(ValueError, match=(
      rf"^Engine weights_dtype={bad!r}: expected one of "
      r"\['float32', 'bfloat16'\] \(or None: the model's own\)\.$")):
    _engine(weights_dtype=bad)


def test_logp_gap_refuses_results_that_do_not_match_the_prompts():
  prompts = _prompts()
  results = _engine().generate(prompts, SAMPLED, jax.random.key(0))
  with pytest.raises(ValueError, match="3 prompts but 2 results"):
    logp_gap(_model(), prompts, results[:2])
  empty = [r.__class__([], np.zeros(0, np.float32), "length", None)
           for r in results]
  with pytest.raises(ValueError, match="no generated tokens"):
    logp_gap(_model(), prompts, empty)
