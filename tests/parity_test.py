"""Logit parity with transformers (torch CPU) on tiny random checkpoints.

Each family is built with transformers' own config class, saved with
`save_pretrained`, loaded with ours, and compared on a random batch; then ours
is saved with `save_hf_checkpoint` and read back by transformers.
"""

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="parity tests need torch (pip install -e .[test]; only "
    "torch==2.13.0 for Python 3.11 is available offline)")
transformers = pytest.importorskip("transformers")

from mgrpo_jax.models import load_model, save_hf_checkpoint  # noqa: E402
from model_test_utils import VOCAB, tiny_tokenizer  # noqa: E402

TOL = 1e-4
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
              num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
              pad_token_id=2)
CASES = {
    # Untied, GQA 4/2, Llama-3 RoPE scaling, rope_theta 5e5.
    "llama_llama3_rope": lambda: transformers.LlamaConfig(
        **COMMON, num_key_value_heads=2, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                         "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64}),
    # SmolLM2-like: tied embeddings, GQA 4/1, rope_theta 1e5.
    "llama_tied": lambda: transformers.LlamaConfig(
        **COMMON, num_key_value_heads=1, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        rms_norm_eps=1e-5),
    # q/k/v bias, untied, GQA 4/2, rope_theta 1e6.
    "qwen2_bias": lambda: transformers.Qwen2Config(
        **COMMON, num_key_value_heads=2, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    # q/k RMSNorm, head_dim 32 != hidden / heads = 16, GQA 4/2.
    "qwen3_qk_norm": lambda: transformers.Qwen3Config(
        **COMMON, num_key_value_heads=2, head_dim=32,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
    # Mixture of experts: 8 experts of width 32, 2 per token (renormalised).
    "qwen3_moe": lambda: transformers.Qwen3MoeConfig(
        **COMMON, num_key_value_heads=2, head_dim=16,
        tie_word_embeddings=False, moe_intermediate_size=32,
        num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
}


def _random_hf_model(hf_config, seed=0):
  """A transformers model, every weight random (norms near 1, biases != 0)."""
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(
      hf_config, dtype=torch.float32).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      p.normal_(0.0, 0.1)
      if "norm" in name:
        p.add_(1.0)
  return model


def _torch_logits(model, tokens):
  with torch.no_grad():
    return model(torch.as_tensor(tokens)).logits.float().numpy()


def _tokens(seed=0):
  return np.random.default_rng(seed).integers(0, VOCAB, size=(2, 24))


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers_and_save_round_trip(case, tmp_path):
  hf_model = _random_hf_model(CASES[case]())
  hf_model.save_pretrained(tmp_path / "hf")
  tiny_tokenizer().save(tmp_path / "hf")
  tokens = _tokens()
  want = _torch_logits(hf_model, tokens)

  model, tok = load_model(tmp_path / "hf")
  got = np.asarray(model(jnp.asarray(tokens)))
  diff = np.abs(got - want).max()
  assert diff <= TOL, f"{case}: max |logit diff| = {diff:.2e} > {TOL}"

  save_hf_checkpoint(model, tok, tmp_path / "ours")
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(
      tmp_path / "ours", dtype=torch.float32).eval()
  back = _torch_logits(reloaded, tokens)
  diff = np.abs(back - got).max()
  assert diff <= TOL, f"{case} saved by us: max |logit diff| = {diff:.2e}"


def test_bfloat16_checkpoint(tmp_path):
  hf_model = _random_hf_model(CASES["qwen2_bias"]())
  hf_model.to(torch.bfloat16).save_pretrained(tmp_path)
  tiny_tokenizer().save(tmp_path)
  tokens = _tokens(1)
  want = _torch_logits(transformers.AutoModelForCausalLM.from_pretrained(
      tmp_path, dtype=torch.float32).eval(), tokens)
  model, _ = load_model(tmp_path)  # bf16 file, float32 parameters
  diff = np.abs(np.asarray(model(jnp.asarray(tokens))) - want).max()
  assert diff <= TOL, f"bf16 file, f32 params: max |logit diff| = {diff:.2e}"
  model, _ = load_model(tmp_path, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)
  got = np.asarray(model(jnp.asarray(tokens)))
  assert model.wq[...].dtype == jnp.bfloat16
  # bf16 compute: a smoke bound, a few percent of the logit range.
  assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()


def test_moe_logits_match_transformers_over_a_padded_batch(tmp_path):
  """Rows of different lengths, right-padded: the real positions' logits
  equal transformers' with its attention mask (routing is per token, so
  padding changes nothing else)."""
  hf_model = _random_hf_model(CASES["qwen3_moe"]())
  hf_model.save_pretrained(tmp_path)
  tiny_tokenizer().save(tmp_path)
  tokens = _tokens(2)
  lengths = [24, 15]
  mask = np.arange(24)[None, :] < np.array(lengths)[:, None]
  padded = np.where(mask, tokens, 0)
  with torch.no_grad():
    want = hf_model(torch.as_tensor(padded),
                    attention_mask=torch.as_tensor(mask.astype(np.int64))
                    ).logits.float().numpy()
  model, _ = load_model(tmp_path)
  got = np.asarray(model(jnp.asarray(padded)))
  diff = np.abs(got - want)[mask].max()
  assert diff <= TOL, f"padded MoE batch: max |logit diff| = {diff:.2e}"
