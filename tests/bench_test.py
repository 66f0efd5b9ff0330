"""The benchmark's two train steps compute the same loss on the same weights
(so the speed table compares like with like)."""

import numpy as np
import pytest

from mgrpo_jax.bench import train_step
from mgrpo_jax.models import (ModelConfig, init_model, load_model,
                              save_hf_checkpoint)
from model_test_utils import tiny_tokenizer


def test_jax_and_torch_steps_run_on_the_same_checkpoint(tmp_path):
  pytest.importorskip("torch", reason="torch (test extra, Python 3.11 "
                              "only) runs the PyTorch side of the benchmark")
  transformers = pytest.importorskip("transformers")
  config = ModelConfig(family="llama", vocab_size=64, hidden_size=32,
                       intermediate_size=48, num_layers=2, num_heads=4,
                       num_kv_heads=2, head_dim=8, rope_theta=1e4,
                       rms_norm_eps=1e-6, tie_word_embeddings=True)
  model = init_model(config, seed=0)
  save_hf_checkpoint(model, tiny_tokenizer(), tmp_path)
  hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
  tokens = np.random.default_rng(0).integers(0, 64, (2, 9))
  ours = train_step.jax_train_step_seconds(load_model(tmp_path)[0], tokens, 1)
  theirs = train_step.torch_train_step_seconds(hf, tokens, 1)
  assert ours["seconds"] > 0 and ours["compile_seconds"] > 0
  assert theirs["seconds"] > 0
  assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-5)


def test_an_unavailable_tunix_leaves_its_column_a_reason(monkeypatch):
  """The benchmark still runs without Tunix: its column says why."""
  from mgrpo_jax.bench import speed, tunix_sampler
  monkeypatch.setattr(tunix_sampler, "available",
                      lambda: "google-tunix is not installed")
  assert speed.tunix_peer(None, None, 100, np.random.default_rng(0)) == (
      None, "google-tunix is not installed")
  monkeypatch.setattr(tunix_sampler, "available", lambda: None)
  monkeypatch.setattr(tunix_sampler, "load", lambda hf_dir: 1 / 0)
  handle, why = speed.tunix_peer(None, None, 100, np.random.default_rng(0))
  assert handle is None and why.startswith("Tunix failed: ZeroDivisionError")


def test_decode_profile_times_every_part_of_a_step():
  """The README's decode profile runs on the engine's current window layout
  (it crashed once the cache went heads-first)."""
  from mgrpo_jax.bench import decode_profile
  config = ModelConfig(family="llama", vocab_size=64, hidden_size=32,
                       intermediate_size=48, num_layers=2, num_heads=4,
                       num_kv_heads=2, head_dim=8, rope_theta=1e4,
                       rms_norm_eps=1e-6, tie_word_embeddings=True)
  rows, layer_bytes = decode_profile.profile(config, 3, 16, repeats=1)
  assert [name.strip().split(":")[0] for name, _ in rows] == [
      "decode step", "decode step, bfloat16 weights",
      "layer matmuls alone, float32", "layer matmuls alone, bfloat16 weights",
      "vocabulary projection", "vocabulary projection, bfloat16 weights",
      "token sampling (temperature 1)"]
  assert all(ms > 0 for _, ms in rows)
  assert layer_bytes > 0


def test_train_profile_times_each_part_and_the_per_layer_step_is_the_same():
  from mgrpo_jax.bench import train_profile
  config = ModelConfig(family="llama", vocab_size=64, hidden_size=32,
                       intermediate_size=48, num_layers=2, num_heads=4,
                       num_kv_heads=2, head_dim=8, rope_theta=1e4,
                       rms_norm_eps=1e-6, tie_word_embeddings=True)
  tokens = np.random.default_rng(0).integers(0, 64, size=(2, 9))
  rows = train_profile.profile(init_model(config), tokens, repeats=1)
  names = [name.strip().split(" (")[0] for name, *_ in rows]
  assert names == ["forward + backward", "forward alone",
                   "forward + backward of the layers alone",
                   "forward + backward, per-layer weights, layers unrolled"]
  assert all(s > 0 and c > 0 for _, s, c, _ in rows)
  stacked, forward_only, _, per_layer = (loss for *_, loss in rows)
  assert forward_only == pytest.approx(stacked, rel=1e-5)
  assert per_layer == pytest.approx(stacked, rel=1e-5)
