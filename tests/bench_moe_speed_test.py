"""bench/moe_speed.py: the MoE and its dense twin, each measured."""

import pytest

from mgrpo_jax.bench import moe_speed


def test_the_twins_have_equal_active_sizes():
  c = moe_speed.configs(layers=1, width=64)
  assert c["moe"].experts_per_token * c["moe"].moe_intermediate_size == \
      c["dense"].intermediate_size
  assert (c["moe"].hidden_size, c["moe"].num_layers) == (
      c["dense"].hidden_size, c["dense"].num_layers)


@pytest.mark.slow  # Three tiny models' train steps and samplers (25 s).
def test_each_variant_is_measured():
  out = moe_speed.measure(batch=2, length=16, new_tokens=4, repeats=1,
                          layers=1, width=64)
  assert set(out) == {"dense", "moe (blocks)", "moe (ragged_dot)", "settings"}
  for label in ("dense", "moe (blocks)", "moe (ragged_dot)"):
    assert out[label]["train_step_seconds"] > 0
    assert out[label]["sampler_tokens_per_second"] > 0
  assert out["moe (blocks)"]["params"] > out["dense"]["params"]
  assert "| moe (blocks) |" in moe_speed.report({"machine": "m", **out})
