"""bench/fits.py: bytes per chip from model configs alone."""

import jax
import pytest

from mgrpo_jax.bench import fits
from mgrpo_jax.models import lora
from mgrpo_jax.models.config import ModelConfig


@pytest.mark.parametrize("model, billions", [
    ("Qwen3-1.7B", 1.72), ("Qwen3-8B", 8.19), ("Qwen3-30B-A3B", 30.53)])
def test_the_models_have_their_published_sizes(model, billions):
  config = ModelConfig.from_hf(fits.MODELS[model])
  assert config.num_params / 1e9 == pytest.approx(billions, abs=0.01)


def test_smollm2_is_the_shipped_checkpoint_s_config():
  from mgrpo_jax.models.hf_checkpoint import read_config
  from mgrpo_jax.models.loading import converted_checkpoint
  shipped = read_config(converted_checkpoint("smollm2-135m-instruct"))
  ours = ModelConfig.from_hf(fits.MODELS["SmolLM2-135M"])
  assert ours.num_params == shipped.num_params
  assert (ours.num_layers, ours.num_kv_heads) == (shipped.num_layers,
                                                  shipped.num_kv_heads)


@pytest.mark.parametrize("model", ["Qwen3-1.7B", "Qwen3-30B-A3B"])
def test_adapter_count_is_what_lora_makes(model):
  config = ModelConfig.from_hf({**fits.MODELS[model], "num_hidden_layers": 1})
  targets = (("wq", "wk", "wv", "wo", "router") if config.num_experts
             else ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"))
  shapes = jax.eval_shape(lambda: lora.init_adapters(
      config, targets, rank=fits.LORA_RANK, alpha=32.0,
      key=jax.random.key(0)).weights)
  made = sum(a.size + b.size for a, b in shapes.values())
  assert fits.lora_params(config) == made


def test_the_paper_pair_needs_a_large_slice_and_lora_halves_it():
  rows = fits.table_rows()
  assert fits.smallest(rows, "Qwen3-30B-A3B", "full") == "v5p-32"
  assert fits.smallest(rows, "Qwen3-30B-A3B", "lora") == "v5e-32"
  smol = [r for r in rows if r["model"] == "SmolLM2-135M"]
  assert all(r["full_fits"] and r["lora_fits"] for r in smol)
  assert "| Qwen3-8B (8.19B) | 38.8 (no) / 16.1 (no) | 19.4 (no) / 8.1 |" \
      in fits.table(rows)


def test_the_committed_table_is_what_the_command_writes_now():
  import pathlib
  committed = pathlib.Path(__file__).resolve().parents[1] / "launch" / \
      "results" / "fits.md"
  assert committed.read_text() == fits.table(fits.table_rows()) + "\n"
