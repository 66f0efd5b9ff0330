"""bench.multihost: one role over two processes against one process."""

import pytest
from trainer_test_utils import CHILD_CONFIG, tiny_config

from mgrpo_jax.bench import multihost


def _records(step_seconds, loss):
  return [{"step": 0, "eval/accuracy": 0.5}] + [
      {"step": s, "time/step": t, "time/rollout": t / 2,
       "time/main_update": t / 4, "time/sub_update": t / 8,
       "main/loss": loss, "weights/sub_checksum": s, "time": 1e9 + s,
       "rollout/tokens_per_second": 100.0 / t}
      for s, t in zip((1, 2, 3), step_seconds)]


def test_medians_leave_out_the_first_step_and_the_gap_is_relative():
  out = multihost.compare(_records([9.0, 2.0, 4.0], 0.5),
                          _records([20.0, 3.0, 5.0], 0.5005))
  assert out["steps"] == [2, 3]
  assert out["medians"]["1x4"]["time/step"] == 3.0
  assert out["medians"]["2x2"]["time/rollout"] == 2.0
  assert out["largest_relative_gap"] == pytest.approx(0.0005 / 0.5005)
  assert (out["figures_equal"], out["figures_compared"]) == (0, 3)
  text = multihost.table({**out, "machine": "m"})
  assert "| time/step | 3.00 | 4.00 | 1.33x |" in text


def test_runs_that_logged_other_steps_are_refused():
  with pytest.raises(ValueError, match=r"1x4 \[1, 2, 3\], 2x2 \[1, 2\]"):
    multihost.compare(_records([1.0, 1.0, 1.0], 0.0),
                      _records([1.0, 1.0], 0.0))


@pytest.mark.slow  # Three tiny runs in real processes (a few minutes).
def test_both_layouts_run_the_same_steps(tmp_path):
  config = tiny_config(tmp_path)
  path = tmp_path / "tiny.py"
  path.write_text(CHILD_CONFIG.format(text=config.to_json()))
  one = multihost.run_layout(str(path), 2, tmp_path, 1)
  two = multihost.run_layout(str(path), 2, tmp_path, 2)
  out = multihost.compare(one, two)
  assert out["steps"] == [2]
  assert out["largest_relative_gap"] < 1e-4
  assert (tmp_path / "1x4_0.log").is_file() and (tmp_path / "2x2_1.log"
                                                  ).is_file()
