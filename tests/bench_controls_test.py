"""The positive controls' bench (bench/controls.py)."""

import json
import pathlib

import pytest

from mgrpo_jax.bench import controls
from mgrpo_jax.train.outcomes import write_outcomes


def _run(tmp_path, start, end, sampled=None):
  """A run directory whose two evaluations answered `start` and `end`
  greedily (and `sampled`: a pair of per-question lists of samples)."""
  run = tmp_path / "run"
  (run / "all").mkdir(parents=True)
  lines = []
  for n, (step, answers) in enumerate(((0, start), (10, end))):
    write_outcomes(str(run / "all"), step, {"validation": {
        f"q{i}": right for i, right in enumerate(answers)},
        "validation_sampled": {f"q{i}": s for i, s in enumerate(
            sampled[n])} if sampled else {}})
    lines.append({"step": step, "eval/accuracy": sum(answers) / len(answers),
                  "eval/sub_report_accuracy": 0.5})
  lines.append({"step": 5, "time/step": 3.0, "sub/ref_kl": 0.1})
  (run / "all" / "metrics.jsonl").write_text(
      "".join(json.dumps(line) + "\n" for line in lines))
  return run


def test_a_rise_beyond_twice_the_paired_noise_passes(tmp_path):
  # 16 questions: 6 went wrong -> right, none right -> wrong: +37.5 points,
  # noise sqrt(6) / 16 = 15.3 points.
  start = [0] * 10 + [1] * 6
  end = [1] * 6 + [0] * 4 + [1] * 6
  figures = controls.summarise(_run(tmp_path, start, end))
  assert figures["change"] == pytest.approx(6 / 16)
  assert figures["noise"] == pytest.approx(6 ** 0.5 / 16)
  assert figures["passed"] and figures["questions"] == 16
  assert figures["median time/step"] == 3.0
  assert figures["evaluations"]["0"]["sub_report_accuracy"] == 0.5
  table = controls.table({"sub": figures})
  assert ("| sub | greedy (primary) | +37.5 points | 15.3 points | yes | 16 "
          "|") in table
  assert figures["sampled"] is None and figures["measure"] == "greedy"


def test_sampled_outcomes_are_the_primary_measure(tmp_path):
  # Greedy already right on every question (no room: +0); sampled, each
  # question's two rollouts went from 1 of 2 to 2 of 2 on 6 questions.
  n = 8
  sampled = ([[1, 0]] * 6 + [[1, 1]] * 2, [[1, 1]] * 8)
  figures = controls.summarise(_run(tmp_path, [1] * n, [1] * n, sampled))
  assert figures["measure"] == "sampled" and figures["greedy"]["change"] == 0
  diffs = [0.5] * 6 + [0.0] * 2
  assert figures["change"] == pytest.approx(sum(diffs) / n)
  sd = (sum((d - 0.375) ** 2 for d in diffs) / (n - 1)) ** 0.5
  assert figures["noise"] == pytest.approx(sd / n ** 0.5)
  assert figures["passed"]
  table = controls.table({"sub": figures})
  assert "| sub | sampled (primary) | +37.5 points |" in table
  assert "| sub | greedy | +0.0 points | 0.0 points | no |" in table
  with pytest.raises(ValueError, match="share 1 questions"):
    controls.sampled_change({"q0": [1]}, {"q0": [0]})


def test_a_rise_within_the_noise_fails(tmp_path):
  start = [0, 1, 0, 1, 0, 1, 0, 1]
  end = [1, 0, 1, 0, 1, 1, 0, 1]  # +1 question, 5 discordant.
  figures = controls.summarise(_run(tmp_path, start, end))
  assert not figures["passed"]


def test_a_run_without_two_evaluations_is_named(tmp_path):
  run = tmp_path / "run"
  (run / "all").mkdir(parents=True)
  write_outcomes(str(run / "all"), 0, {"validation": {"q0": 1}})
  (run / "all" / "metrics.jsonl").write_text('{"step": 0}\n')
  with pytest.raises(RuntimeError, match="needs step 0 and a later one"):
    controls.summarise(run)


def test_bad_arguments_are_named(capsys):
  with pytest.raises(SystemExit):
    controls.parse_args(["--which", "sub,planner"])
  assert "planner" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    controls.parse_args(["--set", "train.steps"])
  assert "expected KEY=VALUE" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_controls_run_and_resume(tmp_path, monkeypatch):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  args = ["--quick", "--out", str(tmp_path / "out")]
  controls.main(args)
  summary = json.loads((tmp_path / "out" / "controls.json").read_text())
  assert sorted(summary["results"]) == ["main", "sub"]
  assert all(r["steps"] == 1 for r in summary["results"].values())
  finished = sorted((tmp_path / "out" / "runs").glob("*/finished"))
  assert len(finished) == 2
  stamps = [f.stat().st_mtime_ns for f in finished]
  controls.main(args)  # Finished runs are kept, not run again.
  assert [f.stat().st_mtime_ns for f in finished] == stamps


def test_readme_s_controls_table_is_the_committed_result():
  root = pathlib.Path(__file__).resolve().parents[1]
  results = json.loads((root / "launch" / "results" / "controls" /
                        "controls.json").read_text())["results"]
  readme = (root / "README.md").read_text()
  pct = lambda v: f"{100 * v:.1f}%"
  for name, label in (("sub", "sub-agent alone"), ("main", "planner alone")):
    r = results[name]
    start, end = r["evaluations"]["0"], r["evaluations"][str(r["steps"])]
    row = next(line for line in readme.splitlines()
               if line.startswith(f"| {label}"))
    assert r["passed"] and r["measure"] == "sampled"
    assert (f"| {pct(start['sampled_accuracy'])} -> "
            f"{pct(end['sampled_accuracy'])} | {100 * r['change']:+.1f} "
            f"points, {100 * r['noise']:.1f}: passes | "
            f"{pct(start['accuracy'])} -> {pct(end['accuracy'])} | "
            f"{r['median time/step']:.0f} |") in row
