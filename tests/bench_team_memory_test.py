"""bench.team_memory: a team's step time and peak memory by batch size,
each size in its own (real) child process."""

import pytest
from trainer_test_utils import CHILD_CONFIG, tiny_config

from mgrpo_jax.bench import team_memory


def test_sizes_parse_and_bad_ones_are_named():
  assert team_memory.parse_sizes("4x4,8X2") == [(4, 4), (8, 2)]
  for bad in ("4x", "0x4", "4*4", ""):
    with pytest.raises(ValueError, match="--sizes"):
      team_memory.parse_sizes(bad)


@pytest.mark.slow  # A child process trains a tiny team (a minute).
def test_a_sweep_measures_each_size_and_stops_past_the_limit(tmp_path):
  config = tiny_config(tmp_path)
  path = tmp_path / "tiny.py"
  path.write_text(CHILD_CONFIG.format(text=config.to_json()))
  out = team_memory.sweep(str(path), [(2, 2), (4, 2)], steps=2, warmup=0,
                          limit_gib=0.01, log=lambda line: None)
  [row] = out["sizes"]  # The first size passed 0.01 GiB: the sweep stopped.
  assert (row["B"], row["K"]) == (2, 2)
  assert row["peak_host_gib"] > 0.01 and out["largest_fitting"] is None
  assert out["stopped"].startswith("2x2: peak")
  parts = (row["rollout_seconds"] + row["main_update_seconds"]
           + row["sub_update_seconds"] + row["other_seconds"])
  assert parts == pytest.approx(row["step_seconds"], rel=1e-6)
  assert row["rollout_seconds"] > 0 and row["sub_update_seconds"] > 0
  # What the memory holds at that size (bench.memory), beside the peak.
  assert row["planned_gib"] == pytest.approx(sum(row["parts_gib"].values()))
  assert row["largest_part"] in row["parts_gib"]
  table = team_memory.table({**out, "config": "tiny", "machine": "m"})
  assert "| 2x2 |" in table and f"({row['largest_part']} " in table and "largest B x K within 0.01 GiB: None" in table


def test_each_size_borrows_the_configs_warm_start_only_while_it_runs(
    tmp_path):
  own, sized = tmp_path / "own", tmp_path / "sized"
  own.mkdir()
  with team_memory.same_warm_start(own, sized):
    assert not sized.exists()  # The config has no warm start yet.
  (own / team_memory.FIGURES).write_text("{}")
  with pytest.raises(RuntimeError):
    with team_memory.same_warm_start(own, sized):
      assert (sized / team_memory.FIGURES).is_file()  # Reads the own entry.
      raise RuntimeError("the size failed")
  assert not sized.exists() and (own / team_memory.FIGURES).is_file()
  sized.mkdir()  # A size with an entry of its own keeps it.
  with team_memory.same_warm_start(own, sized):
    assert not sized.is_symlink()
  assert sized.is_dir()


def test_sizes_not_run_are_estimated_from_their_plan_and_measured_overhead(
    tmp_path):
  config = tiny_config(tmp_path)
  path = tmp_path / "tiny.py"
  path.write_text(CHILD_CONFIG.format(text=config.to_json()))
  measured = [{"B": 2, "K": 2, "planned_gib": 0.01, "peak_host_gib": 1.01}]
  out = team_memory.plan(str(path), [(2, 2), (64, 64)], measured,
                         limit_gib=1.0105)
  small, big = out["planned_sizes"]
  assert out["overhead_gib"] == pytest.approx(1.0)
  assert small["estimated_peak_gib"] == pytest.approx(
      small["planned_gib"] + 1.0)
  # More live conversations: larger KV caches, a larger plan.
  assert big["planned_gib"] > small["planned_gib"]
  assert out["largest_estimated"] == ("2x2" if small["estimated_peak_gib"]
                                      <= 1.0105 else None)
  table = team_memory.table({"config": "tiny", "machine": "m", "sizes": [],
                             "largest_fitting": None, "stopped": "",
                             "limit_gib": 1.0, **out})
  assert "| 64x64 (not run) |" in table and "largest estimated" in table
  assert team_memory.plan(str(path), [(2, 2)], [], 1.0)[
      "largest_estimated"] is None  # No size ran: nothing to estimate from.
