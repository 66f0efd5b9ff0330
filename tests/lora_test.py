"""models/lora.py and the learner's LoRA mode: adapters start as the
identity, only they train, and the merged weights are the adapted model."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import build, lora
from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.train.learner import Learner
from mgrpo_jax.train.packing import pack
from trainer_test_utils import learner_config

CONFIG = ModelConfig(family="llama", vocab_size=64, hidden_size=32,
                     intermediate_size=48, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=8, rope_theta=1e4,
                     rms_norm_eps=1e-6, tie_word_embeddings=True)


def _batch():
  rng = np.random.default_rng(0)
  tokens = [rng.integers(0, 64, size=n) for n in (20, 14, 17, 9)]
  masks = [np.arange(len(t)) >= 5 for t in tokens]
  return pack(tokens, masks, [1.0, -1.0, 0.5, -0.5], micro_batch=2,
              min_len=16, max_len=32)


def _lora_learner(rank=4, **kw):
  model = build.init_model(CONFIG, seed=0)
  return Learner("main", model, learner_config(**{
      "learning_rate": 1e-2, "micro_batch": 2, "min_len": 16, "max_len": 32,
      "lora_rank": rank, "lora_alpha": 8.0, **kw}))


def test_fresh_adapters_are_the_identity_and_merging_equals_adapting():
  model = build.init_model(CONFIG, seed=0)
  tokens = jnp.arange(12)[None] % 64
  adapters = lora.init_adapters(CONFIG, ("wq", "wv", "w_down"), rank=4,
                                alpha=8.0, key=jax.random.key(0))
  np.testing.assert_array_equal(np.asarray(model(tokens, adapters=adapters)),
                                np.asarray(model(tokens)))
  moved = lora.Adapters({k: (a, b + 0.1) for k, (a, b) in
                         adapters.weights.items()}, adapters.scale)
  _, state = nnx.split(model)
  flat = list(nnx.to_flat_state(state))
  arrays = {".".join(map(str, p)): v[...] for p, v in flat}
  merged = build.model_from_arrays(CONFIG, {
      k: np.asarray(v) for k, v in lora.merged(arrays, moved).items()})
  np.testing.assert_allclose(np.asarray(merged(tokens)),
                             np.asarray(model(tokens, adapters=moved)),
                             rtol=1e-5, atol=1e-5)
  # L = 2 layers of A [in, 4] and B [4, out]: wq 32 -> 32, wv 32 -> 16,
  # w_down 48 -> 32.
  assert lora.num_params(adapters) == 2 * 4 * ((32 + 32) + (32 + 16) + (48 + 32))


def test_only_the_adapters_train_and_the_first_step_scores_the_base():
  learner = _lora_learner()
  base = jax.tree.map(np.asarray, learner.base)
  plain = Learner("main", build.init_model(CONFIG, seed=0), learner_config(
      learning_rate=1e-2, micro_batch=2, min_len=16, max_len=32))
  batch = _batch()
  # Before any update the adapted model is the base: the same log-probs.
  np.testing.assert_array_equal(np.asarray(learner.logprobs(batch)),
                                np.asarray(plain.logprobs(batch)))
  before = jax.tree.map(np.asarray, learner.params)
  metrics = learner.step(batch)
  assert metrics["grad_norm"] > 0
  chex.assert_trees_all_equal(jax.tree.map(np.asarray, learner.base), base)
  assert set(learner.params) == {"wq", "wk", "wv", "wo", "w_gate", "w_up",
                                 "w_down"}
  # B moved off zero: the adapted model now differs from the base.
  assert not np.allclose(np.asarray(learner.params["wq"][1]),
                         np.asarray(before["wq"][1]))
  tokens = jnp.asarray(batch.inputs_NxT[:1])
  adapted = learner.model()(tokens)
  base_model = nnx.merge(learner.graphdef, learner.base)
  assert not np.allclose(np.asarray(adapted), np.asarray(base_model(tokens)))
  np.testing.assert_allclose(
      np.asarray(adapted),
      np.asarray(base_model(tokens, adapters=learner.adapters)), rtol=1e-5,
      atol=1e-5)


def test_the_kl_reference_of_a_lora_learner_is_the_base():
  learner = _lora_learner(log_ref_kl=True)
  batch = _batch()
  assert learner.step(batch)["ref_kl"] == pytest.approx(0.0, abs=1e-7)
  assert learner.step(batch)["ref_kl"] > 0


@pytest.mark.parametrize("overrides, message", [
    (dict(lora_rank=-1), "lora_rank=-1: expected an integer >= 0"),
    (dict(lora_rank=4, lora_alpha=0.0), "lora_alpha=0.0: expected a number"),
    (dict(lora_rank=4, lora_targets=("wq", "attn")), r"lora_targets=\['wq', "
     r"'attn'\]: \['attn'\] names no adaptable matrix of this llama model"),
])
def test_bad_lora_settings_are_named(overrides, message):
  with pytest.raises(ValueError, match=message):
    _lora_learner(**{"rank": overrides.pop("lora_rank"), **overrides})


def _lora_run(tmp_path, steps, **train):
  from trainer_test_utils import tiny_config
  config = tiny_config(tmp_path, steps=steps, **train)
  for side in ("main", "sub"):
    config.learner[side].lora_rank = 4
    config.learner[side].lora_targets = ("wq", "wv", "w_up")
  config.agents.share_base = True
  return config


def _store_bytes(path):
  import pathlib
  return sum(f.stat().st_size for f in pathlib.Path(path).rglob("*")
             if f.is_file())


@pytest.mark.slow  # Three tiny runs (~30 s); the default run keeps the
# learner-level LoRA tests above.
def test_a_lora_run_stores_only_adapters_and_resumes_exactly(tmp_path):
  import json
  import pathlib
  from mgrpo_jax.train import trainer
  from trainer_test_utils import by_step
  straight = _lora_run(tmp_path / "a", 2, eval_every=1)
  trainer.run(straight, log=lambda line: None)
  halted = _lora_run(tmp_path / "b", 1, eval_every=1)
  trainer.run(halted, log=lambda line: None)
  halted.train.steps = 2  # Continue the finished run: resume at step 1.
  lines = []
  trainer.run(halted, log=lines.append)
  assert any("resumed from the checkpoint of step 1" in l for l in lines)
  read = lambda c: by_step(json.loads(line) for line in (
      pathlib.Path(c.run_dir) / "all" / "metrics.jsonl").open())
  assert read(halted)[2] == read(straight)[2]
  # The store's sub-agent weights and the checkpoints are adapters only:
  # a small fraction of the model's bytes.
  from mgrpo_jax.bench.memory import model_config
  model_bytes = 4 * model_config(straight).num_params
  run = pathlib.Path(straight.run_dir)
  assert 0 < _store_bytes(run / "store" / "weights" / "sub") < model_bytes / 2
  assert _store_bytes(run / "checkpoints" / "sub") < model_bytes
  from mgrpo_jax.train.trained import load_trained
  with pytest.raises(ValueError, match="the main agent trained LoRA adapters "
                     r"\(rank 4\), so its checkpoints hold the adapters only"):
    load_trained(run / "checkpoints" / "main")


def test_share_base_needs_adapters_for_every_trained_agent(tmp_path):
  from mgrpo_jax.runtime.config_checks import ConfigError
  from mgrpo_jax.train import trainer
  config = _lora_run(tmp_path, 1)
  config.learner.sub.lora_rank = 0
  with pytest.raises(ConfigError, match=r"config.agents.share_base=True: "
                     r"expected False, or lora_rank > 0 for every agent "
                     r"\(learner.sub.lora_rank is 0"):
    trainer.run(config, log=lambda line: None)


def test_share_base_refuses_different_models_or_devices(tmp_path):
  import jax
  from mgrpo_jax.train import adapters
  from trainer_test_utils import tiny_config
  config = tiny_config(tmp_path)
  config.agents.share_base = True
  small = build.init_model(CONFIG, seed=0)
  other = build.init_model(ModelConfig(**{**CONFIG.__dict__,
                                          "num_layers": 1}), seed=0)
  one = jax.make_mesh((1, 1), ("fsdp", "tp"), devices=jax.devices()[:1])
  two = jax.make_mesh((1, 1), ("fsdp", "tp"), devices=jax.devices()[1:2])
  shared = adapters.share_bases(config, {"main": small, "sub": small},
                                {"main": one, "sub": one})
  assert shared["sub"] is shared["main"]
  with pytest.raises(ValueError, match="sub's model differs from main's"):
    adapters.share_bases(config, {"main": small, "sub": other},
                         {"main": one, "sub": one})
  with pytest.raises(ValueError, match=r"sub is on devices \(1,\) and main "
                     r"on \(0,\); expected the same devices"):
    adapters.share_bases(config, {"main": small, "sub": small},
                         {"main": one, "sub": two})
