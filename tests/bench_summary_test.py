"""The benchmark's one table: each figure against its target."""

import json

import pytest

from mgrpo_jax.bench import summary

SPEED = {"machine": "AMD EPYC, 2 CPUs, Linux", "generate": [
    {"batch": 8, "ours": {"tokens_per_second": 90.0},
     "torch": {"tokens_per_second": 30.0},
     "tunix": {"unavailable": "google-tunix is not installed"}},
    {"batch": 32, "ours": {"tokens_per_second": 100.0},
     "ours_bfloat16": {"tokens_per_second": 130.0,
                       "logp_gap": {"mean_abs": 0.0184, "max_abs": 0.089}},
     "torch": {"tokens_per_second": 80.0},
     "tunix": {"tokens_per_second": 50.0}}],
    "train_step": {"batch": 4, "length": 128, "ours": {"seconds": 4.0},
                   "torch": {"seconds": 2.0}}}
STEP = {"machine": "AMD EPYC, 2 CPUs, Linux", "overhead_share": 0.01,
        "step_seconds": 20.0, "compilations_per_100_steps": 25.0,
        "cache_loads_per_100_steps": 20.0, "memory": {"host_rss_mib": 3000.0}}


def test_rows_compare_each_figure_with_its_target(tmp_path):
  (tmp_path / "speed.json").write_text(json.dumps(SPEED))
  (tmp_path / "step.json").write_text(json.dumps(STEP))
  out = summary.summarize(tmp_path)
  by_name = {r["measurement"]: r for r in out["rows"]}
  hf8 = by_name["sampler tokens/s, batch 8, vs HF generate"]
  assert (hf8["ratio"], hf8["status"]) == ("3.00x", "met")
  tunix8 = by_name["sampler tokens/s, batch 8, vs Tunix"]
  assert tunix8["peer"] == "google-tunix is not installed"
  assert tunix8["status"] == "not measured"
  hf32 = by_name["sampler tokens/s, batch 32, vs HF generate"]
  assert (hf32["ratio"], hf32["status"]) == ("1.25x", "missed")
  assert by_name["sampler tokens/s, batch 32, vs Tunix"]["status"] == "met"
  # The bfloat16 option is its own row, with its log-prob gap; batch 8's
  # speed.json (an older version's) has none.
  label = ("sampler tokens/s, batch 32, bfloat16 weights option (log-prob "
           "gap to float32: mean 0.018, max 0.089), vs ")
  assert (by_name[label + "HF generate"]["ratio"],
          by_name[label + "HF generate"]["status"]) == ("1.62x", "met")
  assert by_name[label + "Tunix"]["ratio"] == "2.60x"
  assert not any("batch 8, bfloat16" in name for name in by_name)
  train = next(r for r in out["rows"] if r["measurement"].startswith(
      "train step"))
  assert (train["ratio"], train["status"]) == ("0.50x", "missed")
  overhead = next(r for r in out["rows"] if "overhead" in r["measurement"])
  assert overhead["status"] == "met"
  compiles = by_name["compilations per 100 steps after warm-up"]
  assert compiles["status"] == "missed"
  loads = by_name["  of which loaded from the persistent compilation cache"]
  assert (loads["ours"], loads["target"]) == ("20", "-")
  assert by_name["rollouts.json"]["ours"] == "missing"
  written = json.loads((tmp_path / "bench.json").read_text())
  assert written["machines"] == ["AMD EPYC, 2 CPUs, Linux"]
  assert "| measurement |" in summary.table(out["rows"])


def test_bad_folder_or_file_is_named(tmp_path):
  with pytest.raises(ValueError, match="no such folder"):
    summary.summarize(tmp_path / "nope")
  (tmp_path / "step.json").write_text("{oops")
  with pytest.raises(ValueError, match=r"step.json: not JSON"):
    summary.summarize(tmp_path)
  assert summary.main(["summary", str(tmp_path)]) == 1
  assert summary.main(["summary"]) == 2


def test_a_step_file_without_cache_loads_still_reads(tmp_path):
  old = {k: v for k, v in STEP.items() if k != "cache_loads_per_100_steps"}
  (tmp_path / "step.json").write_text(json.dumps(old))
  names = [r["measurement"] for r in summary.summarize(tmp_path)["rows"]]
  assert "compilations per 100 steps after warm-up" in names
  assert not any("persistent" in n for n in names)


def test_closed_shapes_are_compared_with_open_ones(tmp_path):
  phases = {"rollout": 10.0, "main learner": 4.0, "sub learner": 5.0}
  closed = {"compilations_after_first_step": 0.0,
            "compilations_per_100_steps": 0.0,
            "cache_loads_per_100_steps": 0.0,
            "phases": {"rollout": 10.2, "main learner": 4.4,
                       "sub learner": 5.0},
            "startup": {"programs": 140.0, "compile_seconds": 60.0,
                        "programs/main_sampler": 66.0}}
  step_json = {**STEP, "phases": phases, "compilations_after_first_step": 7.0,
               "closed": closed}
  (tmp_path / "step.json").write_text(json.dumps(step_json))
  by_name = {r["measurement"]: r for r in summary.summarize(tmp_path)["rows"]}
  # The default's (closed) compilations, the open run's beside them.
  per_100 = by_name["compilations per 100 steps after warm-up"]
  assert (per_100["ours"], per_100["peer"], per_100["status"]) == (
      "0", "open 25", "met")
  assert by_name["  of which loaded from the persistent compilation cache"][
      "ours"] == "0"
  after = by_name["closed shapes: compilations after the first step"]
  assert (after["ours"], after["peer"], after["status"]) == ("0", "open 7",
                                                             "met")
  startup = by_name["closed shapes: programs compiled at start-up (seconds)"]
  assert (startup["ours"], startup["status"]) == ("140 (60 s)",
                                                  "main_sampler 66")
  rollout = by_name["closed shapes: rollout seconds of the median step, vs "
                    "open"]
  assert (rollout["ratio"], rollout["status"]) == ("0.98x", "met")
  main = by_name["closed shapes: main learner seconds of the median step, "
                 "vs open"]
  assert (main["ratio"], main["status"]) == ("0.91x", "missed")


def test_the_closed_set_s_programs_have_a_row_per_agent_and_part(tmp_path):
  (tmp_path / "step.json").write_text(json.dumps(STEP))
  starts = {"first": {"main": {"sampler": [66, 40.0], "learner": [5, 9.0]}},
            "second": {"main": {"sampler": [66, 4.0], "learner": [5, 1.0]}}}
  (tmp_path / "programs.json").write_text(json.dumps(
      {"config": "configs/default.py", "starts": starts}))
  by_name = {r["measurement"]: r for r in summary.summarize(tmp_path)["rows"]}
  row = by_name["closed set of configs/default.py: main sampler programs "
                "(compile s, first start / second)"]
  assert row["ours"] == "66 (40.0 / 4.0 s)"


def test_the_moe_rows_compare_grouped_experts_with_every_expert(tmp_path):
  (tmp_path / "step.json").write_text(json.dumps(STEP))
  fig = lambda step, tps: {"params": 1, "train_step_seconds": step,
                           "sampler_tokens_per_second": tps}
  (tmp_path / "moe_speed.json").write_text(json.dumps({
      "dense": fig(0.5, 100.0), "moe (blocks)": fig(1.0, 80.0),
      "moe (ragged_dot)": fig(2.0, 100.0), "settings": {}}))
  rows = {r["measurement"]: r for r in summary.summarize(tmp_path)["rows"]}
  step = rows["MoE train step seconds, grouped experts vs every expert "
              "(dense twin: 0.5)"]
  assert (step["ratio"], step["status"]) == ("2.00x", "met")
  sampler = rows["MoE sampler tokens/s, grouped experts vs every expert "
                 "(dense twin: 100)"]
  assert (sampler["ratio"], sampler["status"]) == ("0.80x", "missed")
