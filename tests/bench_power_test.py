"""The power estimate of the comparison (bench/power.py)."""

import json
import math
import pathlib

import pytest

from mgrpo_jax.bench import power


def test_seeds_needed_matches_the_normal_approximation_from_above():
  # With sigma = effect the normal approximation says (1.96 + 0.84)^2 =
  # 7.85 seeds; the t quantiles of so few seeds ask for more: 10.
  assert power.seeds_needed(0.05, 0.05) == 10
  # Halving the effect roughly quadruples the seeds.
  assert 30 <= power.seeds_needed(0.05, 0.025) <= 34
  assert power.seeds_needed(0.01, 0.10) == 2  # The fewest a t-test allows.
  with pytest.raises(ValueError, match="sigma=0"):
    power.seeds_needed(0.0, 0.05)


def test_sigma_scales_with_the_test_questions():
  reference = {"analysis": {"paired": {"mgrpo": {
      "differences": [0.02, -0.02, 0.04, -0.04]}}}}
  at_200 = power.seed_sigma(reference, 200)
  assert at_200 == pytest.approx(math.sqrt(0.004 / 3))
  assert power.seed_sigma(reference, 50) == pytest.approx(2 * at_200)


def _controls(tmp_path):
  result = lambda step, evaluation: {
      "median time/step": step, "mean time/eval": evaluation,
      "questions": 50, "sft_seconds": 600.0,
      "sampled": {"samples": 1}}  # Half of each evaluation's rollouts.
  folder = tmp_path / "controls"
  folder.mkdir()
  (folder / "controls.json").write_text(json.dumps({
      "machine": "a CPU", "results": {"sub": result(100.0, 200.0),
                                      "main": result(50.0, 100.0)}}))
  return folder


def test_hours_add_up_steps_evaluations_and_warm_starts(tmp_path):
  controls = json.loads((_controls(tmp_path) / "controls.json").read_text())
  costs = power.run_costs(controls, 100)
  assert costs == {"step": 150.0, "evaluation": 300.0, "warm_start": 600.0}
  # A seed: one warm start, two arms of 40 steps and two evaluations.
  assert power.plan_hours(costs, 8, 40) == pytest.approx(
      8 * (600 + 2 * (40 * 150 + 2 * 300)) / 3600)
  with pytest.raises(ValueError, match="no main control"):
    power.run_costs({"results": {"sub": {}}}, 100)


def test_the_command_writes_its_table(tmp_path):
  reference = tmp_path / "results.json"
  reference.write_text(json.dumps({"analysis": {"paired": {"mgrpo": {
      "differences": [0.05, -0.015, -0.03, -0.01, 0.035, -0.06, 0.03,
                      -0.005]}}}}))
  out = tmp_path / "out"
  power.main(["--controls", str(_controls(tmp_path)), "--reference",
              str(reference), "--out", str(out)])
  summary = json.loads((out / "power.json").read_text())
  assert [r["effect"] for r in summary["rows"]] == [0.05, 0.10]
  assert summary["rows"][0]["seeds"] > summary["rows"][1]["seeds"]
  assert "| 5 points |" in (out / "power.md").read_text()


@pytest.mark.parametrize("args, named", [
    (["--effects", "five"], "--effects 'five'"),
    (["--effects", "0.05,2"], "fractions in (0, 1)"),
    (["--steps", "0"], "--steps 0"),
    (["--controls", "/nonexistent"], "no controls.json there")])
def test_bad_arguments_are_named(args, named, capsys):
  with pytest.raises(SystemExit):
    power.main(args)
  assert named in capsys.readouterr().err


def test_readme_s_power_figures_are_the_committed_estimate():
  root = pathlib.Path(__file__).resolve().parents[1]
  summary = json.loads((root / "launch" / "results" / "controls" /
                        "power.json").read_text())
  readme = " ".join((root / "README.md").read_text().split())
  assert (f"8 seeds x 2 arms x 40 steps take {summary['hours_8_seeds']:.1f} "
          f"hours on this CPU (a team step {summary['costs_seconds']['step']:.0f}"
          " s") in readme
  five, ten = summary["rows"]
  assert (f"takes {five['seeds']} seeds ({five['hours']:.1f} h), a 10-point "
          f"one {ten['seeds']} ({ten['hours']:.1f} h)") in readme
