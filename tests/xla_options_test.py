"""Which library runs training's CPU matmuls: the choice, its bad values,
and that it changes no gradient beyond float32 rounding."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import ModelConfig, init_model
from mgrpo_jax.runtime import xla_options

CONFIG = ModelConfig(family="llama", vocab_size=256, hidden_size=64,
                     intermediate_size=128, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=16, rope_theta=1e4,
                     rms_norm_eps=1e-5, tie_word_embeddings=True)


def test_bad_choice_names_the_variable_the_value_and_the_choices(
    monkeypatch):
  monkeypatch.setenv(xla_options.MATMUL_ENV, "mkl")
  with pytest.raises(ValueError) as e:
    xla_options.training_options()
  assert "MGRPO_JAX_CPU_MATMUL='mkl'" in str(e.value)
  assert "ynn, xla" in str(e.value)


def test_xla_choice_asks_for_nothing(monkeypatch):
  monkeypatch.setenv(xla_options.MATMUL_ENV, "xla")
  assert xla_options.training_options() is None


def test_default_on_cpu_is_ynnpack_where_this_jaxlib_has_it(monkeypatch):
  monkeypatch.delenv(xla_options.MATMUL_ENV, raising=False)
  options = xla_options.training_options()
  if xla_options._ynn_compiles():  # pylint: disable=protected-access
    assert options == {"xla_cpu_experimental_ynn_fusion_type":
                       "LIBRARY_FUSION_TYPE_DOT"}
  else:
    assert options is None


def _loss_and_grads(options):
  graphdef, state = nnx.split(init_model(CONFIG, seed=3))
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 256, (4, 33)))

  def loss_fn(state):
    logits = nnx.merge(graphdef, state)(tokens[:, :-1])
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], -1))

  step = jax.jit(jax.value_and_grad(loss_fn), compiler_options=options)
  return step(state)


def test_ynnpack_gradients_equal_xla_ones_to_float32_rounding():
  if not xla_options._ynn_compiles():  # pylint: disable=protected-access
    pytest.skip("this jaxlib's CPU compiler has no YNNPACK option")
  loss_a, grads_a = _loss_and_grads(None)
  loss_b, grads_b = _loss_and_grads(xla_options._YNN)  # pylint: disable=protected-access
  assert float(loss_b) == pytest.approx(float(loss_a), rel=1e-6)
  chex.assert_trees_all_close(grads_b, grads_a, rtol=1e-4, atol=1e-7)
