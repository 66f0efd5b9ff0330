"""bench.memory: an agent's memory by part, from the config alone."""

import pytest
from flax import nnx

from mgrpo_jax.bench import memory
from mgrpo_jax.models.build import init_model
from mgrpo_jax.runtime.config_checks import load_config_file
from mgrpo_jax.train.learner import Learner
from mgrpo_jax.train.side import learner_config


@pytest.fixture(scope="module")
def config():
  c = load_config_file("configs/default.py")
  for agent in ("main", "sub"):
    c.learner[agent].micro_batch = 2
    c.learner[agent].max_len = 64
    c.agents[agent].rows = 4
    c.agents[agent].context_tokens = 128
  c.learner.sub.beta = 0.01  # The sub-agent keeps a reference copy.
  return c


def test_parts_follow_the_shapes_and_the_total_adds_them(config):
  result = memory.measure(config)
  model = memory.model_config(config)
  count = sum(v[...].size
              for _, v in nnx.to_flat_state(nnx.state(init_model(model))))
  main, sub = result["agents"]["main"], result["agents"]["sub"]
  assert main["weights"] == 4 * count and main["adam"] == 8 * count
  assert main["reference"] == 0 and sub["reference"] == 4 * count
  assert main["kv_cache"] == (2 * model.num_layers * 4 * model.num_kv_heads
                              * 128 * model.head_dim * 4)
  assert main["logits"] == 4 * 2 * 64 * model.vocab_size
  assert main["update_temps"] > main["logits"] > 0
  persistent = sum(a[k] for a in (main, sub) for k in a
                   if k not in ("logits", "update_temps"))
  assert result["total_bytes"] == persistent + max(main["update_temps"],
                                                   sub["update_temps"])
  assert result["largest"] in result["by_part"]
  assert "| total |" in memory.table(result)


def test_an_abstract_learner_compiles_the_program_a_real_one_runs(config):
  model = memory.model_config(config)
  settings = learner_config(config, "main")
  abstract = Learner("main", nnx.eval_shape(lambda: init_model(model)),
                     settings)
  real = Learner("main", init_model(model), settings)
  assert abstract.abstract and not real.abstract
  assert abstract.update_memory(2, 64) == real.update_memory(2, 64)

