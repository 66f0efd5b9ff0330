"""The reproduction harness: planning, bad input, resuming, and (slow) the
whole `bash launch/reproduce.sh --quick` from the repository."""

import json
import pathlib
import subprocess
import sys

import pytest

from mgrpo_jax import reproduce, reproduce_report
from mgrpo_jax.train.outcomes import write_outcomes

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_plan_pairs_arms_by_seed():
  runs = reproduce.plan("main", list(reproduce.ARMS), 3, quick=False)
  assert [(r.seed, r.name) for r in runs[:5]] == [
      (0, "frozen_sub"), (0, "mgrpo"), (0, "mgrpo_no_credit"),
      (0, "mgrpo_expert"), (0, "single_agent")]
  assert len(runs) == 15 and {r.seed for r in runs} == {0, 1, 2}
  no_credit = dict(runs[2].overrides)
  assert no_credit == {"mode": "mgrpo", "reward.v_main": 0.0}
  assert dict(runs[3].overrides)["reward.preset"] == "with_expert"
  assert runs[0].config.endswith("reproduce.py:full")
  clean = reproduce.plan("clean", ["mgrpo"], 1, quick=True)[0]
  assert clean.config.endswith(":quick:clean")
  assert clean.directory_name == "clean-mgrpo-seed0"
  ablations = reproduce.plan("ablations", [], 2, quick=False)
  assert len(ablations) == 2 * len(reproduce.ABLATIONS)
  off = next(r for r in ablations if r.name == "align_off")
  assert dict(off.overrides)["align.d_max"] == 0
  command = reproduce.command(runs[2], pathlib.Path("/x"))
  assert "--config.reward.v_main=0.0" in command
  assert "--config.seed=0" in command and "--config.run_dir=/x" in command


def test_the_main_suite_has_the_registered_seeds_per_arm_seed_major():
  """8 seeds of the primary pair, 4 of every other arm, 0 .. n-1; the early
  seeds have every arm first (a suite run in several sittings)."""
  runs = reproduce.plan("main", list(reproduce.ARMS), None, quick=False)
  seeds = {}
  for run in runs:
    seeds.setdefault(run.name, []).append(run.seed)
  assert seeds == {arm: list(range(n))
                   for arm, n in reproduce.MAIN_SEEDS.items()}
  assert reproduce.MAIN_SEEDS["mgrpo"] == reproduce.MAIN_SEEDS[
      "frozen_sub"] >= 8
  assert all(n >= 4 for n in reproduce.MAIN_SEEDS.values())
  assert [r.name for r in runs[20:]] == ["frozen_sub", "mgrpo"] * 4
  assert {r.seed for r in runs[:20]} == {0, 1, 2, 3}
  quick = reproduce.plan("main", list(reproduce.ARMS), None, quick=True)
  assert len(quick) == 2 * len(reproduce.ARMS)


def test_estimate_counts_a_warm_start_per_seed_and_layout(tmp_path):
  runs = reproduce.plan("main", ["frozen_sub", "mgrpo", "single_agent"], 2,
                        quick=False)
  cost = reproduce.COST
  full = reproduce.estimate(runs, tmp_path)
  assert full == pytest.approx(
      2 * (cost["frozen_sub"] + cost["mgrpo"] + cost["single_agent"])
      + 4 * cost["warm_start"])
  done = tmp_path / "runs" / runs[0].directory_name
  done.mkdir(parents=True)
  (done / reproduce.FINISHED).write_text("1\n")
  # Seed 0's team warm start exists once its first run finished.
  assert reproduce.estimate(runs, tmp_path) == pytest.approx(
      full - cost["frozen_sub"] - cost["warm_start"])


def test_default_is_the_main_suite_with_every_arm():
  args = reproduce.parse_args([])
  assert args.suites == ["main"] and args.arm_list == list(reproduce.ARMS)
  assert args.out == "runs/reproduce"
  assert reproduce.parse_args(["--quick"]).out == "runs/reproduce_quick"
  both = reproduce.parse_args(["--suite", "main,clean"])
  assert both.suites == ["main", "clean"]


@pytest.mark.parametrize("argv, message", [
    (["--arms", "mgrpo,planner_only"], "unknown 'planner_only'"),
    (["--suite", "main,extra"], "unknown 'extra'"),
    (["--arms", ""], "empty"),
    (["--seeds", "0"], r"--seeds=0: expected an integer >= 1"),
])
def test_bad_arguments_are_named(argv, message, capsys):
  with pytest.raises(SystemExit) as exit_info:
    reproduce.parse_args(argv)
  assert exit_info.value.code == 2
  assert message in capsys.readouterr().err


def fake_metrics(run_dir, tokens, accuracies):
  (run_dir / "all").mkdir(parents=True)
  for step, accuracy in enumerate(accuracies):  # 10 questions.
    right = round(10 * accuracy)
    write_outcomes(str(run_dir / "all"), step, {
        "validation": {"v0": 1},
        "test": {f"q{i}": int(i < right) for i in range(10)}})
  lines = [{"step": 0, "sft/steps": 1.0},
           {"step": 0, "test/accuracy": accuracies[0], "eval/accuracy": 0.0,
            "test/sub_report_accuracy": 0.5}]
  for step, (n, acc) in enumerate(zip(tokens, accuracies[1:]), 1):
    lines.append({"step": step, "rollout/generated_tokens": n,
                  "time/step": 1.0, "jit/compilations": 10.0 + step,
                  "test/accuracy": acc, "test/sub_report_accuracy": 0.6})
  lines.append(lines[-1])  # A resumed run repeats its last step.
  (run_dir / "all" / "metrics.jsonl").write_text(
      "".join(json.dumps(x) + "\n" for x in lines))


def test_results_curves_budgets_and_the_paired_difference(tmp_path):
  results = []
  for seed, (mgrpo, frozen) in enumerate([(0.5, 0.4), (0.6, 0.45)]):
    for arm, final in (("mgrpo", mgrpo), ("frozen_sub", frozen)):
      run_dir = tmp_path / f"{arm}-{seed}"
      fake_metrics(run_dir, [100, 100], [0.1, 0.2, final])
      results.append(reproduce_report.run_result(
          run_dir, suite="main", name=arm, seed=seed))
  first = results[0]
  assert first["sampled_tokens"] == 200 and first["test_accuracy"] == 0.5
  assert [p["sampled_tokens"] for p in first["curve"]] == [0, 100, 200]
  assert first["compilations"] == 12 and first["sub_report_accuracy"] == 0.6
  assert first["start_test_accuracy"] == 0.1
  assert first["test_question_ids"] == [f"q{i}" for i in range(10)]
  assert first["test_outcomes"] == {"0": "1" + "0" * 9, "1": "11" + "0" * 8,
                                    "2": "11111" + "0" * 5}
  assert reproduce_report.at_budget(first["curve"], 150) == 0.2
  assert reproduce_report.budgets(results) == [67, 133, 200]
  table = reproduce_report.table("main", results)
  assert "mgrpo − frozen_sub" in table and "12.5 ± 3.5 (10.0 / 15.0)" in table
  assert "| test acc. final | sampled tokens |" in table
  assert "| test acc. at 67 tokens | test acc. at 133 tokens |" in table
  assert reproduce_report._cell([-1e-17, 1e-17]) == "0.0 ± 0.0 (0.0 / 0.0)"
  paths = reproduce_report.write(tmp_path, "main", results)
  assert [p.name for p in paths] == ["results.md", "results.png",
                                     "results.json"]
  saved = json.loads(paths[2].read_text())
  assert saved["runs"][0]["arm"] == "mgrpo" and saved["budgets"][-1] == 200


def test_each_arm_keeps_its_colour_in_every_panel(tmp_path, monkeypatch):
  """single_agent has no sub-agent figures: the other arms must not take
  its colour in those panels (one legend per panel, one colour per arm)."""
  from matplotlib import pyplot  # pylint: disable=g-import-not-at-top
  results = []
  for arm, sub in (("single_agent", None), ("frozen_sub", 0.3),
                   ("mgrpo", 0.4)):
    curve = [{"step": s, "sampled_tokens": 100.0 * s, "test_accuracy": 0.1,
              "sub_report_accuracy": sub, "sub_visit_rate": sub,
              "delegations_hop2": sub} for s in range(3)]
    results.append({"arm": arm, "seed": 0, "curve": curve,
                    "test_accuracy": 0.1, "sampled_tokens": 200.0,
                    "sub_report_accuracy": sub, "steps": 2,
                    "start_test_accuracy": 0.1, "test_question_ids": ["q"],
                    "test_outcomes": {"2": "1"}})
  monkeypatch.setattr(pyplot, "close", lambda figure: None)
  reproduce_report.plot(tmp_path / "x.png", "main", results)
  colours = {}
  for ax in pyplot.gcf().axes:
    for line in ax.get_lines():
      colours.setdefault(line.get_label(), set()).add(line.get_color())
  pyplot.close("all")
  assert all(len(c) == 1 for c in colours.values()), colours
  assert len({c.pop() for c in colours.values()}) == 3
  # Re-drawing a finished suite from its JSON; a directory without one.
  (tmp_path / "results.json").write_text(json.dumps({"runs": results,
                                                     "table": "old"}))
  assert reproduce_report.redraw(tmp_path) == [
      tmp_path / "results.md", tmp_path / "results.png",
      tmp_path / "results.json"]
  summary = json.loads((tmp_path / "results.json").read_text())
  assert summary["runs"] == results
  assert summary["table"] == (tmp_path / "results.md").read_text()
  assert "| frozen_sub | 10.0 ± 0.0 (10.0) |" in summary["table"]
  with pytest.raises(FileNotFoundError, match="no finished reproduction"):
    reproduce_report.redraw(tmp_path / "empty")


def test_a_run_without_test_figures_is_refused(tmp_path):
  (tmp_path / "all").mkdir()
  (tmp_path / "all" / "metrics.jsonl").write_text('{"step": 1}\n')
  with pytest.raises(RuntimeError, match="no test evaluation"):
    reproduce_report.run_result(tmp_path, suite="main", name="x", seed=0)


def test_a_finished_reproduction_is_never_overwritten(tmp_path, capsys):
  (tmp_path / "results.json").write_text("{}")
  with pytest.raises(SystemExit) as exit_info:
    reproduce.main(["--quick", "--out", str(tmp_path)])
  assert exit_info.value.code == 2
  assert "holds a finished reproduction" in capsys.readouterr().err
  assert (tmp_path / "results.json").read_text() == "{}"


def test_finished_runs_are_kept_and_not_rerun(tmp_path, monkeypatch):
  run = reproduce.plan("main", ["mgrpo"], 1, quick=True)[0]
  done = tmp_path / "runs" / run.directory_name
  done.mkdir(parents=True)
  (done / "result.json").write_text(json.dumps({"arm": "mgrpo"}))
  monkeypatch.setattr(reproduce.subprocess, "call",
                      lambda *a, **k: pytest.fail("a finished run reran"))
  assert reproduce.execute(run, tmp_path, print) == {"arm": "mgrpo"}


@pytest.mark.slow
def test_quick_reproduction_end_to_end(tmp_path):
  """`bash launch/reproduce.sh --quick`: every arm x 2 seeds; then the same
  command resumes nothing and refuses to overwrite."""
  out = tmp_path / "quick"
  done = subprocess.run(["bash", "launch/reproduce.sh", "--quick", "--out",
                         str(out)], cwd=ROOT, capture_output=True, text=True,
                        timeout=900)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  saved = json.loads((out / "results.json").read_text())
  runs = saved["runs"]
  assert sorted((r["arm"], r["seed"]) for r in runs) == sorted(
      (arm, seed) for arm in reproduce.ARMS for seed in (0, 1))
  for r in runs:
    assert 0 <= r["test_accuracy"] <= 1 and r["sampled_tokens"] > 0
    assert len(r["curve"]) == 3  # Steps 0, 1, 2.
    if r["arm"] == "single_agent":
      assert r["sub_report_accuracy"] is None
  assert (out / "results.png").stat().st_size > 0
  # Per-question outcomes at every evaluation, and the analysis on them.
  for r in runs:
    assert sorted(r["test_outcomes"]) == ["0", "1", "2"]
    assert len(r["test_outcomes"]["2"]) == len(r["test_question_ids"]) == 8
  assert set(saved["analysis"]["paired"]) == set(reproduce.ARMS) - {
      "frozen_sub"}
  assert "McNemar" in saved["table"]
  again = subprocess.run([sys.executable, "-m", "mgrpo_jax.reproduce",
                          "--quick", "--out", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
  assert again.returncode == 2 and "finished reproduction" in again.stderr


def test_finished_results_of_an_earlier_sitting_are_taken(tmp_path, capsys):
  runs = reproduce.plan("main", ["mgrpo", "frozen_sub"], 1, quick=True)
  folder = tmp_path / "committed"
  (folder / runs[0].directory_name).mkdir(parents=True)
  (folder / runs[0].directory_name / "result.json").write_text(json.dumps(
      {"arm": runs[0].name, "seed": 0, "test_accuracy": 0.5}))
  out = tmp_path / "out"
  assert reproduce.take_finished(folder, runs, out) == [
      runs[0].directory_name]
  taken = out / "runs" / runs[0].directory_name / "result.json"
  assert json.loads(taken.read_text())["test_accuracy"] == 0.5
  # Already there: left alone.
  taken.write_text(json.dumps({"arm": runs[0].name, "seed": 0}))
  assert reproduce.take_finished(folder, runs, out) == []
  assert "test_accuracy" not in json.loads(taken.read_text())
  # A result filed under another run's name is refused.
  (folder / runs[1].directory_name).mkdir()
  (folder / runs[1].directory_name / "result.json").write_text(json.dumps(
      {"arm": "mgrpo", "seed": 0}))
  with pytest.raises(SystemExit):
    reproduce.take_finished(folder, runs, out)
  assert "expected 'frozen_sub' seed 0" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    reproduce.take_finished(tmp_path / "nope", runs, out)


def test_results_carry_their_test_questions_hop_counts(tmp_path):
  """A finished result gets the hop count of each test question from the
  world its config describes (also one written before they were added)."""
  run = reproduce.plan("main", ["mgrpo"], 1, quick=True)[0]
  hops = reproduce.question_hops(run.config)
  assert set(hops.values()) == {1, 2}
  ids = sorted(hops)[:3]
  done = tmp_path / "runs" / run.directory_name
  done.mkdir(parents=True)
  (done / "result.json").write_text(json.dumps(
      {"arm": "mgrpo", "seed": 0, "test_question_ids": ids}))
  result = reproduce.execute(run, tmp_path, print)
  assert result["test_question_hops"] == [hops[q] for q in ids]
  saved = json.loads((done / "result.json").read_text())
  assert saved["test_question_hops"] == result["test_question_hops"]
