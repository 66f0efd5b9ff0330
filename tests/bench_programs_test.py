"""bench/programs.py: each agent's closed set of programs, compiled as a
training process does at start-up."""

import pytest

from mgrpo_jax.bench import programs
from trainer_test_utils import tiny_config


@pytest.mark.slow  # Compiles two agents' closed sets (about a minute).
def test_each_agent_compiles_its_closed_set_and_a_twin_sampler_reuses_it(
    tmp_path):
  config = tiny_config(tmp_path)
  config.runtime.decode_windows = 1
  config.runtime.prefill_windows = 1
  config.runtime.prefill_chunk = 64
  out = programs.compile_all(config)
  assert list(out) == ["main", "sub"]
  # Rows 4 (floor 8 capped at the 4 rows): decode 1 x 1 x 3 prefixes,
  # prefill 3 row counts x 3 lengths, copy 3: 15; learner: 3 lengths.
  assert out["main"]["sampler"][0] == out["sub"]["sampler"][0] == 15
  assert out["main"]["learner"][0] == out["sub"]["learner"][0] == 3
  assert out["main"]["sampler"][1] > 0
  # The sub-agent's sampler has the main one's model, shapes and device.
  assert out["sub"]["sampler"][1] < out["main"]["sampler"][1] / 5


def test_the_table_has_a_row_per_agent_and_part_and_both_starts():
  starts = {s: {"main": {"sampler": [15, 9.0 / (i + 1)],
                         "learner": [3, 6.0 / (i + 1)]}}
            for i, s in enumerate(programs.STARTS)}
  text = programs.table({"config": "c.py", "starts": starts})
  assert "| main sampler | 15 | 9.0 | 4.5 |" in text
  assert "| all | 18 | 15.0 | 7.5 |" in text
