"""Per-question outcomes: written per evaluation, read back, last line wins."""

import pytest

from mgrpo_jax.train.outcomes import OUTCOMES_NAME, read_outcomes, write_outcomes


def test_outcomes_round_trip_and_a_redone_step_wins(tmp_path):
  assert read_outcomes(tmp_path) == {}
  write_outcomes(str(tmp_path / "all"), 0, {"validation": {"v1": 1},
                                            "test": {"t1": 0, "t2": 1}})
  write_outcomes(str(tmp_path / "all"), 5, {"validation": {"v1": 0},
                                            "test": {}})
  # A resumed run redoes step 5's evaluation and appends it again.
  write_outcomes(str(tmp_path / "all"), 5, {"validation": {"v1": 1},
                                            "test": {"t1": 1, "t2": 1}})
  read = read_outcomes(tmp_path / "all")
  assert read == {0: {"validation": {"v1": 1}, "test": {"t1": 0, "t2": 1}},
                  5: {"validation": {"v1": 1}, "test": {"t1": 1, "t2": 1}}}


def test_a_broken_line_is_named(tmp_path):
  (tmp_path / OUTCOMES_NAME).write_text('{"step": 0, "test": {}}\nnot json\n')
  with pytest.raises(ValueError, match=f"{OUTCOMES_NAME}:2: not an outcomes"):
    read_outcomes(tmp_path)
