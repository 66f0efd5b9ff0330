"""ParameterView: a checkpoint's parameters read only where indexed."""

import jax
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import AxisType

from mgrpo_jax.models import load_model
from mgrpo_jax.models import tensor_views
from mgrpo_jax.models.hf_checkpoint import (read_hf_checkpoint,
                                            write_hf_checkpoint)
from model_test_utils import random_arrays, tiny_config, tiny_tokenizer


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
  directory = tmp_path_factory.mktemp("ckpt")
  config = tiny_config("qwen3")
  arrays = random_arrays(config)
  write_hf_checkpoint(directory, config, arrays, tiny_tokenizer())
  return directory, arrays


@pytest.mark.parametrize("name,index", [
    ("w_up", (slice(1, 2), slice(16, 48), slice(0, 96))),   # one layer, rows
    ("w_up", (slice(None), slice(None), slice(24, 72))),    # columns (tp)
    ("wo", (slice(0, 2), slice(32, 64))),                   # transposed
    ("embed", (slice(100, 200), slice(None))),              # unstacked
    ("q_norm", (slice(0, 1),)),                             # 1-D per layer
    ("w_down", (slice(1, 1),)),                             # no layers
])
def test_a_region_is_read_alone_and_equals_the_whole_array_s(
    checkpoint, name, index):
  directory, arrays = checkpoint
  view = read_hf_checkpoint(directory, lazy=True)[1][name]
  assert view.shape == arrays[name].shape
  region = view[index]
  np.testing.assert_array_equal(region, arrays[name][index])
  assert view.elements_read == region.size  # nothing outside the region


def test_a_view_reads_whole_as_an_array_in_the_files_dtype(tmp_path):
  config = tiny_config()
  arrays = {k: v.astype(ml_dtypes.bfloat16)
            for k, v in random_arrays(config).items()}
  write_hf_checkpoint(tmp_path, config, arrays, tiny_tokenizer())
  views = read_hf_checkpoint(tmp_path, lazy=True)[1]
  whole = np.asarray(views["w_gate"])
  assert whole.dtype == ml_dtypes.bfloat16
  np.testing.assert_array_equal(whole, arrays["w_gate"])


def test_strided_or_integer_indices_are_refused(checkpoint):
  view = read_hf_checkpoint(checkpoint[0], lazy=True)[1]["w_up"]
  with pytest.raises(IndexError, match=r"contiguous slices; got slice\(0, "
                     r"4, 2\) on axis 1 of shape \(2, 64, 96\)"):
    view[:, 0:4:2]
  with pytest.raises(IndexError, match=r"got 3 on axis 0"):
    view[3]


def test_a_model_on_a_mesh_reads_each_shard_once(checkpoint, monkeypatch):
  directory, arrays = checkpoint
  read = []
  original = tensor_views.ParameterView._read

  def counted(self, piece, index):
    value = original(self, piece, index)
    read.append(value.size)
    return value

  monkeypatch.setattr(tensor_views.ParameterView, "_read", counted)
  mesh = jax.make_mesh((2, 4), ("fsdp", "tp"), devices=jax.devices()[:8],
                       axis_types=(AxisType.Explicit,) * 2)
  model, _ = load_model(str(directory), mesh=mesh)
  # Each distinct shard read once (replicas share it): the whole model once,
  # not once per device.
  assert sum(read) == sum(a.size for a in arrays.values())
  up = model.w_up[...]
  assert up.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tp")
  np.testing.assert_array_equal(np.asarray(up), arrays["w_up"])
  eager, _ = load_model(str(directory))
  for name in ("embed", "wq", "k_norm", "lm_head"):
    np.testing.assert_array_equal(np.asarray(getattr(model, name)[...]),
                                  np.asarray(getattr(eager, name)[...]))
