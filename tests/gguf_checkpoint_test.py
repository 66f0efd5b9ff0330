"""GGUF reading: q/k un-permutation, dequantisation, config, tokenizer, errors.

Tiny GGUF files are written here with `gguf.GGUFWriter` the way llama.cpp's
converter writes them (q/k rows permuted to interleaved RoPE pairs).
"""

import json

import jax.numpy as jnp
import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from mgrpo_jax.models import CheckpointError, load_model  # noqa: E402
from mgrpo_jax.models.build import model_from_arrays  # noqa: E402
from mgrpo_jax.models.gguf_checkpoint import (read_gguf,  # noqa: E402
                                              unpermute_rows)
from mgrpo_jax.models.hf_checkpoint import to_hf_arrays  # noqa: E402
from model_test_utils import (random_arrays, tiny_config,  # noqa: E402
                              tiny_tokenizer)

GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def llamacpp_permute(w, n_head):
  """llama.cpp convert_hf_to_gguf.LlamaModel.permute (HF -> GGUF rows)."""
  return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
          .swapaxes(1, 2).reshape(w.shape))


def write_gguf(path, config, arrays, tok, *, arch="llama", quant=None,
               shapes=None):
  """A llama.cpp-style GGUF of our arrays.

  `quant` (e.g. Q8_0) quantises the matrices; `shapes` maps a GGUF tensor name
  to a wrong shape to write zeros of, or to None to leave it out.
  """
  writer = gguf.GGUFWriter(str(path), arch)
  writer.add_block_count(config.num_layers)
  writer.add_context_length(config.max_position_embeddings)
  writer.add_embedding_length(config.hidden_size)
  writer.add_feed_forward_length(config.intermediate_size)
  writer.add_head_count(config.num_heads)
  writer.add_head_count_kv(config.num_kv_heads)
  writer.add_rope_freq_base(config.rope_theta)
  writer.add_rope_dimension_count(config.head_dim)
  writer.add_layer_norm_rms_eps(config.rms_norm_eps)
  writer.add_vocab_size(config.vocab_size)
  vocab = tok.backend.get_vocab()
  tokens = sorted(vocab, key=vocab.get)
  tokens += [f"<extra_{i}>" for i in range(config.vocab_size - len(tokens))]
  model = json.loads(tok.backend.to_str())["model"]
  writer.add_tokenizer_model("gpt2")
  writer.add_tokenizer_pre("smollm")
  writer.add_token_list(tokens)
  writer.add_token_types([3 if t.startswith("<|") else 1 for t in tokens])
  writer.add_token_merges([" ".join(m) for m in model["merges"]])
  writer.add_bos_token_id(tok.bos_id)
  writer.add_eos_token_id(tok.eos_id)
  writer.add_pad_token_id(tok.pad_id)
  writer.add_unk_token_id(0)
  writer.add_add_bos_token(False)
  writer.add_chat_template(tok.chat_template)
  for hf, value in to_hf_arrays(config, arrays).items():
    if hf.startswith("model.layers."):
      _, _, layer, suffix = hf.split(".", 3)
      name = f"blk.{layer}.{GGUF_NAMES[suffix]}"
    else:
      name = GGUF_NAMES[hf]
    if "attn_q." in name:
      value = llamacpp_permute(value, config.num_heads)
    elif "attn_k." in name:
      value = llamacpp_permute(value, config.num_kv_heads)
    if shapes and name in shapes:
      if shapes[name] is None:  # leave the tensor out
        continue
      value = np.zeros(shapes[name], np.float32)
    if quant is not None and value.ndim == 2:
      writer.add_tensor(name, gguf.quants.quantize(value, quant),
                        raw_dtype=quant)
    else:
      writer.add_tensor(name, value)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()


@pytest.fixture(scope="module")
def tok():
  return tiny_tokenizer()


def test_unpermute_inverts_llamacpp_permute():
  w = np.random.default_rng(0).standard_normal((6 * 8, 5))
  np.testing.assert_array_equal(unpermute_rows(llamacpp_permute(w, 6), 6), w)
  b = np.arange(24.0)
  np.testing.assert_array_equal(unpermute_rows(llamacpp_permute(b, 3), 3), b)
  # HF row h*Dh + j (j < Dh/2) is GGUF row h*Dh + 2j.
  np.testing.assert_array_equal(llamacpp_permute(b, 3)[8:16],
                                [8, 12, 9, 13, 10, 14, 11, 15])


@pytest.mark.parametrize("tied", [True, False])
def test_read_float32_gguf_exactly(tied, tok, tmp_path):
  config = tiny_config(tie_word_embeddings=tied, rope_theta=100000.0,
                       rms_norm_eps=1e-5)
  arrays = random_arrays(config)
  write_gguf(tmp_path / "m.gguf", config, arrays, tok)
  ckpt = read_gguf(tmp_path / "m.gguf")
  assert ckpt.config == config
  for name, value in arrays.items():
    np.testing.assert_array_equal(ckpt.arrays[name], value, err_msg=name)


def test_q8_0_gguf_dequantises_close(tok, tmp_path):
  config = tiny_config()
  arrays = random_arrays(config)
  write_gguf(tmp_path / "m.gguf", config, arrays, tok,
             quant=gguf.GGMLQuantizationType.Q8_0)
  ckpt = read_gguf(tmp_path / "m.gguf")
  for name, value in arrays.items():
    scale = np.abs(value).max()
    np.testing.assert_allclose(ckpt.arrays[name], value, atol=scale / 100,
                               err_msg=name)
  tokens = jnp.asarray([[3, 1, 4, 1, 5, 9, 2, 6]])
  want = np.asarray(model_from_arrays(config, arrays)(tokens))
  got = np.asarray(model_from_arrays(config, ckpt.arrays)(tokens))
  assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


def test_tokenizer_from_gguf_matches_source(tok, tmp_path):
  config = tiny_config()
  write_gguf(tmp_path / "m.gguf", config, random_arrays(config), tok)
  _, got = load_model(tmp_path / "m.gguf")
  for text in ["What is the capital of France?", "x =  2\n  naïve 🤗",
               "<|im_start|>user\nHi<|im_end|>\n"]:
    assert got.encode(text) == tok.encode(text)
  assert (got.bos_id, got.eos_id, got.pad_id) == (1, 2, 2)
  msgs = [{"role": "user", "content": "Hi"}]
  assert got.apply_chat_template(msgs) == tok.apply_chat_template(msgs)


def test_transformers_reads_our_gguf_writer_the_same(tok, tmp_path):
  """Independent check of the permutation: transformers' GGUF loader."""
  torch = pytest.importorskip("torch", reason="needs torch for transformers")
  pytest.importorskip("accelerate", reason="transformers' GGUF load needs it")
  transformers = pytest.importorskip("transformers")
  config = tiny_config(rope_theta=100000.0)
  arrays = random_arrays(config)
  write_gguf(tmp_path / "m.gguf", config, arrays, tok)
  hf = transformers.AutoModelForCausalLM.from_pretrained(
      tmp_path, gguf_file="m.gguf", dtype=torch.float32).eval()
  tokens = np.random.default_rng(0).integers(0, config.vocab_size, (2, 16))
  with torch.no_grad():
    want = hf(torch.as_tensor(tokens)).logits.numpy()
  model, _ = load_model(tmp_path / "m.gguf")
  got = np.asarray(model(jnp.asarray(tokens)))
  assert np.abs(got - want).max() <= 1e-4


def test_non_llama_architecture_is_named(tok, tmp_path):
  config = tiny_config()
  write_gguf(tmp_path / "q.gguf", config, random_arrays(config), tok,
             arch="qwen2")
  with pytest.raises(CheckpointError, match=(
      r"q\.gguf: general\.architecture='qwen2' is not supported; expected "
      r"'llama'")):
    read_gguf(tmp_path / "q.gguf")


def test_tensor_shape_mismatch_is_named(tok, tmp_path):
  config = tiny_config()
  write_gguf(tmp_path / "m.gguf", config, random_arrays(config), tok,
             shapes={"blk.1.ffn_down.weight": (64, 80)})
  with pytest.raises(CheckpointError, match=(
      r"m\.gguf: tensor 'blk\.1\.ffn_down\.weight' has shape \(64, 80\); "
      r"config expects \(64, 96\)")):
    read_gguf(tmp_path / "m.gguf")


def test_missing_tensor_is_named(tok, tmp_path):
  config = tiny_config()
  arrays = random_arrays(config)
  write_gguf(tmp_path / "m.gguf", config, arrays, tok,
             shapes={"blk.1.attn_k.weight": None})
  with pytest.raises(CheckpointError, match=(
      r"m\.gguf: no tensor for parameter 'wk' of layers \[1\] \(expected "
      r"shape \(2, 64, 32\)")):
    read_gguf(tmp_path / "m.gguf")


def test_missing_file(tmp_path):
  with pytest.raises(CheckpointError, match=r"nope\.gguf: GGUF file not found"):
    read_gguf(tmp_path / "nope.gguf")
