"""The pre-registered analysis over fake runs whose figures are known."""

import json

import numpy as np
import pytest

from mgrpo_jax import reproduce_analysis, reproduce_report


def fake_run(arm, seed, start, final, bits, **curve):
  ids = [f"q{i}" for i in range(len(bits))]
  points = [{"step": 0, "sampled_tokens": 0.0, "test_accuracy": start,
             "sub_report_accuracy": 0.3, "sub_visit_rate": 0.5,
             "delegations_hop2": 1.5, "train_accuracy": None,
             "main_informative_groups": None},
            {"step": 10, "sampled_tokens": 100.0, "test_accuracy": final,
             "sub_report_accuracy": 0.4, "sub_visit_rate": 0.6,
             "delegations_hop2": 1.8, "train_accuracy": 0.4,
             "main_informative_groups": 0.8, **curve}]
  return {"arm": arm, "seed": seed, "test_accuracy": final,
          "start_test_accuracy": start, "steps": 10, "curve": points,
          "sampled_tokens": 100.0, "sub_report_accuracy": 0.4,
          "test_question_ids": ids,
          "test_question_hops": [1] * 5 + [2] * (len(bits) - 5),
          "test_outcomes": {"0": "0" * len(bits), "10": bits}}


def suite():
  """4 seeds: mgrpo answers 1-3 more of 10 questions than frozen_sub."""
  results = []
  for seed in range(4):
    ref = "1100000000"
    extra = "1" * (seed % 3 + 1)
    arm = "11" + extra + "0" * (8 - len(extra))
    results.append(fake_run("frozen_sub", seed, 0.1, 0.2, ref))
    results.append(fake_run("mgrpo", seed, 0.1, arm.count("1") / 10, arm))
  return results


def test_primary_endpoint_is_paired_per_seed_with_question_level_tests():
  result = reproduce_analysis.analysis(suite())
  p = result["paired"]["mgrpo"]
  assert p["seeds"] == [0, 1, 2, 3]
  np.testing.assert_allclose(p["differences"], [0.1, 0.2, 0.3, 0.1])
  assert p["mean"] == pytest.approx(0.175)
  assert p["low"] < 0.175 < p["high"]
  assert p["sign_test"]["positive"] == 4 and p["sign_test"]["p"] == 0.125
  assert p["mcnemar"]["arm_only"] == 7 and p["mcnemar"]["reference_only"] == 0
  assert p["mcnemar"]["pairs"] == 40
  assert p["bootstrap"]["mean"] == pytest.approx(0.175)
  arms = result["arms"]
  # Finals 0.3, 0.4, 0.5, 0.3 from warm starts of 0.1.
  assert arms["mgrpo"]["change_from_warm_start"]["mean"] == pytest.approx(
      0.275)
  assert arms["frozen_sub"]["stability"] == 0.0
  assert arms["mgrpo"]["diagnostics"]["train_accuracy"]["mean"] == 0.4
  # By hop count: frozen_sub answers 2 of the 5 one-hop questions, none of
  # the two-hop ones; its warm start ("0" * 10) none.
  hops = arms["frozen_sub"]["by_hops"]
  assert hops["1"]["final"]["mean"] == 0.4 and hops["2"]["final"]["mean"] == 0
  assert hops["1"]["start"]["mean"] == 0.0
  text = reproduce_analysis.markdown(result)
  assert "| frozen_sub | 0.0 [0.0, 0.0] -> 40.0 [40.0, 40.0] |" in text
  assert "| mgrpo | 4 | +17.5 [" in text
  assert "4 / 0 / 0, p = 0.125" in text and "7 / 0, p = 0.016" in text


def test_the_report_adds_the_analysis_and_refuses_runs_without_outcomes(
    tmp_path):
  results = suite()
  paths = reproduce_report.write(tmp_path, "main", results)
  saved = json.loads(paths[2].read_text())
  assert saved["analysis"]["paired"]["mgrpo"]["sign_test"]["positive"] == 4
  assert "McNemar" in saved["table"] and saved["table"] == paths[0].read_text()
  stale = [dict(r) for r in results]
  del stale[3]["test_outcomes"]
  with pytest.raises(RuntimeError,
                     match=r"1 run\(s\) lack per-question test outcomes "
                     r"at their last step \(mgrpo seed 1\)"):
    reproduce_report.write(tmp_path / "x", "main", stale)
  # A results file whose runs lack them: redraw names the file.
  (tmp_path / "results.json").write_text(json.dumps({"runs": stale}))
  with pytest.raises(RuntimeError, match="results.json: 1 run"):
    reproduce_report.redraw(tmp_path)
  # The table alone (the notebook's check of older files) still draws.
  assert "McNemar" not in reproduce_report.table("main", stale)


def test_a_run_on_another_test_split_is_refused():
  results = suite()
  results[1]["test_question_ids"] = [f"x{i}" for i in range(10)]
  with pytest.raises(ValueError, match="mgrpo seed 0: its test questions"):
    reproduce_analysis.analysis(results)
