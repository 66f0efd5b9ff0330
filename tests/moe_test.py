"""models/moe.py: grouped expert matmuls equal the per-token reference, the
Qwen3-MoE decoder generates through the engine, and the config refuses
what it does not implement."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.models import build, moe
from mgrpo_jax.models.config import ModelConfig, ModelConfigError
from mgrpo_jax.sampling import Engine, SamplingParams

MOE = ModelConfig(family="qwen3_moe", vocab_size=128, hidden_size=32,
                  intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8, rope_theta=1e4,
                  rms_norm_eps=1e-6, tie_word_embeddings=False, qk_norm=True,
                  num_experts=8, experts_per_token=2,
                  moe_intermediate_size=16, norm_topk_prob=True)


@pytest.mark.parametrize("impl", moe.IMPLS)
@pytest.mark.parametrize("sizes", [(3, 0, 5, 1), (0, 0, 9, 0), (2, 2, 2, 2)])
def test_grouped_matmul_multiplies_each_group_by_its_own_matrix(impl, sizes):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(sum(sizes), 6)).astype(np.float32)
  w = rng.normal(size=(len(sizes), 6, 5)).astype(np.float32)
  groups = np.repeat(np.arange(len(sizes)), sizes)
  want = np.einsum("mi,mio->mo", x, w[groups])
  got = moe.grouped_matmul(jnp.asarray(x), jnp.asarray(w),
                           jnp.asarray(sizes, jnp.int32), jnp.float32, impl)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def _reference(x, weights, experts, gate, up, down):
  """Each token, each of its experts, one at a time."""
  out = np.zeros_like(x)
  for n in range(x.shape[0]):
    for w, e in zip(weights[n], experts[n]):
      g, u = x[n] @ gate[e], x[n] @ up[e]
      out[n] += w * ((g / (1 + np.exp(-g))) * u) @ down[e]
  return out


@pytest.mark.parametrize("impl", moe.IMPLS)
def test_experts_mlp_and_its_gradient_equal_the_per_token_reference(impl):
  rng = np.random.default_rng(1)
  n, d, f, e, k = 11, 6, 4, 5, 2
  x = rng.normal(size=(n, d)).astype(np.float32)
  gate, up = (rng.normal(size=(e, d, f)).astype(np.float32) for _ in "gu")
  down = rng.normal(size=(e, f, d)).astype(np.float32)
  router = rng.normal(size=(d, e)).astype(np.float32)
  weights, experts, probs = moe.route(
      jnp.asarray(x), jnp.asarray(router), k, True,
      lambda a, w, out: jnp.dot(a, w, preferred_element_type=out))
  np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, rtol=1e-6)
  got = moe.experts_mlp(jnp.asarray(x), weights, experts, gate, up, down,
                        jnp.float32, impl)
  want = _reference(x, np.asarray(weights), np.asarray(experts), gate, up,
                    down)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
  grads = {i: jax.grad(lambda g: jnp.sum(moe.experts_mlp(
      jnp.asarray(x), weights, experts, g, up, down, jnp.float32, i) ** 2))(
          jnp.asarray(gate)) for i in moe.IMPLS}
  np.testing.assert_allclose(np.asarray(grads["blocks"]),
                             np.asarray(grads["ragged_dot"]), rtol=1e-4,
                             atol=1e-4)
  load = moe.expert_load(experts, e)
  np.testing.assert_allclose(float(load.sum()), 1.0, rtol=1e-6)
  picks = np.bincount(np.asarray(experts).ravel(), minlength=e)
  np.testing.assert_allclose(np.asarray(load), picks / picks.sum())
  aux = moe.load_balancing_loss(probs, experts)
  want_aux = e * np.sum(picks / n * np.asarray(probs).mean(0))
  np.testing.assert_allclose(float(aux), want_aux, rtol=1e-5)


@pytest.mark.slow  # Compiles the engine's MoE programs (25 s); the learner
# test below samples through the engine in the default run.
def test_the_moe_decoder_generates_through_the_engine_as_its_full_forward():
  model = build.init_model(MOE, seed=0)
  prompt = list(range(3, 12))
  engine = Engine(model, max_conversations=2, cache_len=64, chunk_steps=4,
                  min_window=32)
  [out] = engine.generate([prompt], SamplingParams(temperature=0.0,
                                                   max_new_tokens=6),
                          jax.random.key(0))
  tokens = list(prompt)
  for _ in range(6):  # Greedy by full forwards of the whole sequence.
    tokens.append(int(jnp.argmax(model(jnp.asarray([tokens]))[0, -1])))
  assert out.tokens == tokens[len(prompt):]


@pytest.mark.parametrize("field, value, message", [
    ("mlp_only_layers", [0], "mlp_only_layers=\\[0\\] is not supported"),
    ("decoder_sparse_step", 2, "decoder_sparse_step=2 is not supported"),
    ("shared_expert_intermediate_size", 64, "shared_expert_intermediate_size"
     "=64 is not supported"),
])
def test_moe_fields_it_does_not_implement_are_refused(field, value, message):
  hf = {**MOE.to_hf(), field: value}
  with pytest.raises(ModelConfigError, match=f"cfg.json: {message}"):
    ModelConfig.from_hf(hf, source="cfg.json")
  assert ModelConfig.from_hf(MOE.to_hf()) == MOE
  hf = {k: v for k, v in MOE.to_hf().items()
        if k not in ("num_experts", "num_local_experts")}
  with pytest.raises(ModelConfigError, match="missing field 'num_experts'"):
    ModelConfig.from_hf(hf)


def test_expert_fields_must_fit_the_family():
  with pytest.raises(ModelConfigError, match="experts_per_token <= "
                     "num_experts"):
    ModelConfig(**{**MOE.__dict__, "experts_per_token": 9})
  with pytest.raises(ModelConfigError, match="family='qwen3' is dense"):
    ModelConfig(**{**MOE.__dict__, "family": "qwen3"})


def _moe_learner(model, **overrides):
  from mgrpo_jax.train.learner import Learner
  from trainer_test_utils import learner_config
  return Learner("main", model, learner_config(
      learning_rate=1e-2, micro_batch=2, min_len=32, max_len=64,
      **overrides))


def test_the_learner_scores_what_the_moe_sampler_sampled_and_logs_routing():
  from mgrpo_jax.train.packing import pack
  model = build.init_model(MOE, seed=1)
  before = np.asarray(model.router[...])  # (The update donates them.)
  engine = Engine(model, max_conversations=4, cache_len=64, chunk_steps=4,
                  min_window=32)
  prompts = [list(range(3, 3 + n)) for n in (5, 9, 7, 12)]
  results = engine.generate(prompts, SamplingParams(temperature=1.0,
                                                    max_new_tokens=6),
                            jax.random.key(2))
  tokens = [np.array(p + r.tokens) for p, r in zip(prompts, results)]
  masks = [np.array([0] * len(p) + [1] * len(r.tokens), bool)
           for p, r in zip(prompts, results)]
  logprobs = [np.concatenate([np.zeros(len(p)), r.logprobs])
              for p, r in zip(prompts, results)]
  batch = pack(tokens, masks, [1.0, -1.0, 0.5, -0.5], micro_batch=2,
               min_len=32, max_len=64, logprobs=logprobs)
  learner = _moe_learner(model)
  metrics = learner.step(batch)
  assert metrics["behaviour_logp_gap_max"] < 1e-4  # On-policy: equal.
  # Router figures over the trained tokens: K = 2 when balanced.
  assert 1.0 < metrics["router_aux_loss"] < 8.0
  assert 1.0 <= metrics["expert_load_max"] <= 8.0
  # The load-balancing loss trains the router only when weighted.
  moved = {}
  for weight in (0.0, 10.0):
    learner = _moe_learner(build.init_model(MOE, seed=1),
                           router_aux_weight=weight)
    learner.step(batch)
    moved[weight] = np.asarray(learner.model().router[...]) - before
  assert not np.allclose(moved[0.0], moved[10.0], atol=1e-6)
