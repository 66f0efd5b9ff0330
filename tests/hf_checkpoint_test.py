"""HF checkpoint directories: round trips, shards, bf16, bad input."""

import json

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

from mgrpo_jax.models import CheckpointError, load_model, save_hf_checkpoint
from mgrpo_jax.models.build import model_from_arrays
from mgrpo_jax.models.config import ModelConfigError
from mgrpo_jax.models.hf_checkpoint import (hf_tensor_names,
                                            read_hf_checkpoint,
                                            to_hf_arrays, write_hf_checkpoint)
from model_test_utils import random_arrays, tiny_config, tiny_tokenizer


@pytest.fixture(scope="module")
def tok():
  return tiny_tokenizer()


@pytest.mark.parametrize("family,tied", [("llama", True), ("qwen2", False),
                                         ("qwen3", False)])
def test_save_then_load_round_trip(family, tied, tok, tmp_path):
  config = tiny_config(family, tie_word_embeddings=tied, head_dim=32)
  arrays = random_arrays(config)
  model = model_from_arrays(config, arrays)
  save_hf_checkpoint(model, tok, tmp_path)
  names = set(safetensors.numpy.load_file(str(tmp_path / "model.safetensors")))
  assert names == set(hf_tensor_names(config))
  assert ("lm_head.weight" in names) == (not tied)
  hf = json.loads((tmp_path / "config.json").read_text())
  assert hf["eos_token_id"] == 2 and hf["model_type"] == family
  read_config, read = read_hf_checkpoint(tmp_path)
  assert read_config == config
  for name, value in arrays.items():
    np.testing.assert_array_equal(read[name], value, err_msg=name)
  loaded, loaded_tok = load_model(tmp_path)
  tokens = jnp.asarray([[3, 5, 7, 11, 13]])
  np.testing.assert_array_equal(np.asarray(loaded(tokens)),
                                np.asarray(model(tokens)))
  assert loaded_tok.apply_chat_template([{"role": "user", "content": "x"}]
                                        ) == tok.apply_chat_template(
                                            [{"role": "user", "content": "x"}])


def test_bfloat16_save_and_load(tok, tmp_path):
  config = tiny_config()
  arrays = random_arrays(config)
  write_hf_checkpoint(tmp_path, config, arrays, tok, dtype=jnp.bfloat16)
  assert json.loads((tmp_path / "config.json").read_text())["dtype"] == (
      "bfloat16")
  _, read = read_hf_checkpoint(tmp_path)
  assert read["wq"].dtype == ml_dtypes.bfloat16
  np.testing.assert_array_equal(read["wq"],
                                arrays["wq"].astype(ml_dtypes.bfloat16))
  model, _ = load_model(tmp_path, param_dtype=jnp.bfloat16,
                        dtype=jnp.bfloat16)
  assert model.wq[...].dtype == jnp.bfloat16
  assert np.isfinite(np.asarray(model(jnp.asarray([[1, 2, 3]])))).all()


def _write_sharded(directory, config, arrays, tok):
  """Two shard files + index, as transformers writes big checkpoints."""
  write_hf_checkpoint(directory, config, arrays, tok)
  (directory / "model.safetensors").unlink()
  tensors = to_hf_arrays(config, arrays)
  names = sorted(tensors)
  files = {"model-00001-of-00002.safetensors": names[::2],
           "model-00002-of-00002.safetensors": names[1::2]}
  weight_map = {}
  for file, part in files.items():
    safetensors.numpy.save_file({n: tensors[n] for n in part},
                                str(directory / file),
                                metadata={"format": "pt"})
    weight_map.update({n: file for n in part})
  (directory / "model.safetensors.index.json").write_text(
      json.dumps({"metadata": {}, "weight_map": weight_map}))
  return files


def test_sharded_checkpoint_loads(tok, tmp_path):
  config = tiny_config("qwen2")
  arrays = random_arrays(config)
  _write_sharded(tmp_path, config, arrays, tok)
  _, read = read_hf_checkpoint(tmp_path)
  for name, value in arrays.items():
    np.testing.assert_array_equal(read[name], value, err_msg=name)


def test_missing_shard_file_is_named(tok, tmp_path):
  config = tiny_config()
  files = _write_sharded(tmp_path, config, random_arrays(config), tok)
  (tmp_path / "model-00002-of-00002.safetensors").unlink()
  with pytest.raises(CheckpointError, match=(
      r"model\.safetensors\.index\.json: names 1 shard file\(s\) not present"
      r".*model-00002-of-00002\.safetensors")):
    read_hf_checkpoint(tmp_path)
  assert len(files) == 2


def test_missing_config_json(tmp_path):
  with pytest.raises(CheckpointError, match=(
      r"config\.json: not found; a Hugging Face checkpoint directory must "
      r"contain config\.json")):
    load_model(tmp_path)


def test_no_weights_file(tok, tmp_path):
  config = tiny_config()
  write_hf_checkpoint(tmp_path, config, random_arrays(config), tok)
  (tmp_path / "model.safetensors").unlink()
  with pytest.raises(CheckpointError,
                     match=r"no model\.safetensors nor model\.safetensors\."
                     r"index\.json"):
    read_hf_checkpoint(tmp_path)


def _rewrite(directory, edit):
  path = str(directory / "model.safetensors")
  tensors = safetensors.numpy.load_file(path)
  edit(tensors)
  safetensors.numpy.save_file(tensors, path, metadata={"format": "pt"})


def test_missing_tensor_is_named(tok, tmp_path):
  config = tiny_config()
  write_hf_checkpoint(tmp_path, config, random_arrays(config), tok)
  _rewrite(tmp_path,
           lambda t: t.pop("model.layers.1.self_attn.k_proj.weight"))
  with pytest.raises(CheckpointError, match=(
      r"model\.safetensors: missing tensor\(s\) "
      r"\['model\.layers\.1\.self_attn\.k_proj\.weight'\]")):
    read_hf_checkpoint(tmp_path)


def test_shape_mismatch_names_file_tensor_and_shapes(tok, tmp_path):
  config = tiny_config()
  write_hf_checkpoint(tmp_path, config, random_arrays(config), tok)

  def shrink(tensors):
    tensors["model.layers.0.mlp.up_proj.weight"] = np.zeros((80, 64),
                                                            np.float32)

  _rewrite(tmp_path, shrink)
  with pytest.raises(CheckpointError, match=(
      r"model\.safetensors: tensor 'model\.layers\.0\.mlp\.up_proj\.weight' "
      r"has shape \(80, 64\); config expects \(96, 64\)")):
    read_hf_checkpoint(tmp_path)


def test_unexpected_tensor_is_named(tok, tmp_path):
  config = tiny_config()
  write_hf_checkpoint(tmp_path, config, random_arrays(config), tok)
  _rewrite(tmp_path, lambda t: t.update(
      {"model.layers.0.mlp.up_proj.bias": np.zeros(96, np.float32)}))
  with pytest.raises(CheckpointError, match=(
      r"no place for: \['model\.layers\.0\.mlp\.up_proj\.bias'\]")):
    read_hf_checkpoint(tmp_path)


def test_tied_head_must_equal_embedding(tok, tmp_path):
  config = tiny_config(tie_word_embeddings=True)
  arrays = random_arrays(config)
  write_hf_checkpoint(tmp_path, config, arrays, tok)
  embed = arrays["embed"]
  _rewrite(tmp_path, lambda t: t.update({"lm_head.weight": embed}))
  read_hf_checkpoint(tmp_path)  # equal copy: accepted
  _rewrite(tmp_path, lambda t: t.update({"lm_head.weight": embed + 1}))
  with pytest.raises(CheckpointError, match=(
      r"'lm_head\.weight' \(shape \(320, 64\)\) differs from "
      r"model\.embed_tokens\.weight")):
    read_hf_checkpoint(tmp_path)


def test_unsupported_model_type(tok, tmp_path):
  config = tiny_config()
  write_hf_checkpoint(tmp_path, config, random_arrays(config), tok)
  hf = json.loads((tmp_path / "config.json").read_text())
  hf["model_type"] = "mistral"
  (tmp_path / "config.json").write_text(json.dumps(hf))
  with pytest.raises(ModelConfigError, match=(
      r"config\.json: model_type='mistral' is not supported; expected one of "
      r"\['llama', 'qwen2', 'qwen3', 'qwen3_moe'\]")):
    load_model(tmp_path)
