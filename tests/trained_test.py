"""Loading a trained agent from a run's Orbax checkpoints + model card."""

import jax
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import Mesh
from model_test_utils import tiny_config, tiny_tokenizer

from mgrpo_jax.models import build
from mgrpo_jax.runtime.checkpoints import AgentCheckpointer
from mgrpo_jax.train.trained import (is_trained_checkpoint, load_trained,
                                        write_model_card)


def leaves(model):
  return [np.asarray(x) for x in jax.tree.leaves(nnx.state(model))]


def test_newest_or_named_step_onto_a_mesh_with_the_tokenizer(tmp_path):
  config = tiny_config(num_layers=1)
  tok = tiny_tokenizer()
  root = tmp_path / "run" / "checkpoints"
  saved = {}
  with AgentCheckpointer(root, "main", max_to_keep=3, save_every=1) as ckpt:
    for step, seed in ((1, 1), (2, 2)):
      params = nnx.split(build.init_model(config, seed=seed))[1]
      opt_state = optax.adam(1e-3).init(params)
      ckpt.save(step, params, opt_state, key=jax.random.key(0),
                data_position=step)
      saved[step] = [np.asarray(x) for x in jax.tree.leaves(params)]
  assert not is_trained_checkpoint(root / "main")  # No card yet.
  write_model_card(root, config, tok)
  assert is_trained_checkpoint(root / "main")
  assert is_trained_checkpoint(root / "main" / "1")
  model, tokenizer, step = load_trained(root / "main")
  assert step == 2
  for got, want in zip(leaves(model), saved[2]):
    np.testing.assert_array_equal(got, want)
  assert tokenizer.encode("hello") == tok.encode("hello")
  mesh = Mesh(np.array(jax.devices()[2:4]).reshape(2, 1), ("fsdp", "tp"))
  model, _, step = load_trained(root / "main" / "1", mesh=mesh)
  assert step == 1
  for got, want in zip(leaves(model), saved[1]):
    np.testing.assert_array_equal(got, want)
  for x in jax.tree.leaves(nnx.state(model)):
    assert set(x.sharding.device_set) <= set(jax.devices()[2:4])


def test_errors_say_what_is_expected(tmp_path):
  with pytest.raises(FileNotFoundError, match="checkpoints/<agent>"):
    load_trained(tmp_path / "nothing" / "main")
  root = tmp_path / "checkpoints"
  (root / "main").mkdir(parents=True)
  write_model_card(root, tiny_config(num_layers=1), tiny_tokenizer())
  with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
    load_trained(root / "main")
  config = tiny_config(num_layers=1)
  params = nnx.split(build.init_model(config, seed=0))[1]
  with AgentCheckpointer(root, "main", max_to_keep=3, save_every=1) as ckpt:
    ckpt.save(3, params, optax.sgd(0.1).init(params), key=jax.random.key(0),
              data_position=3)
  with pytest.raises(FileNotFoundError, match=r"step 7 .*saved steps: \[3\]"):
    load_trained(root / "main" / "7")
