"""The task pilot: its figures from a run's metrics and validation outcomes,
and its bad input."""

import json

import pytest

from mgrpo_jax import reproduce_pilot as pilot
from mgrpo_jax.train.outcomes import write_outcomes


def fake_run(run_dir, start_bits, end_bits, train_accuracy):
  (run_dir / "all").mkdir(parents=True)
  lines = [{"step": 0, "eval/accuracy": start_bits.count("1") / len(
      start_bits), "eval/sub_visit_rate": 0.8,
            "eval/main_delegations_hop2": 1.5}]
  for step in range(1, 7):
    lines.append({"step": step, "main/accuracy": train_accuracy,
                  "main/informative_groups": 0.75,
                  "sub/informative_groups": 0.5, "main/ref_kl": 0.01 * step,
                  "sub/ref_kl": 0.02 * step})
  lines[-1].update({"eval/accuracy": end_bits.count("1") / len(end_bits),
                    "eval/sub_visit_rate": 0.95,
                    "eval/main_delegations_hop2": 1.9})
  (run_dir / "all" / "metrics.jsonl").write_text(
      "".join(json.dumps(x) + "\n" for x in lines))
  for step, bits in ((0, start_bits), (6, end_bits)):
    write_outcomes(str(run_dir / "all"), step, {
        "validation": {f"v{i}": int(b) for i, b in enumerate(bits)}})


def test_paired_noise_is_mcnemars_standard_error():
  start = {"a": 1, "b": 0, "c": 0, "d": 1}
  end = {"a": 1, "b": 1, "c": 1, "d": 0}
  assert pilot.paired_noise(start, end) == pytest.approx(3 ** 0.5 / 4)
  with pytest.raises(ValueError, match="share no question"):
    pilot.paired_noise({"a": 1}, {"b": 1})


def test_summarise_a_run_that_moved(tmp_path):
  fake_run(tmp_path, "1" * 10 + "0" * 90, "1" * 40 + "0" * 60, 0.4)
  figures = pilot.summarise(tmp_path)
  assert figures["train_accuracy"] == 0.4 and figures["informative"] == 0.75
  assert figures["validation_start"] == 0.1
  assert figures["validation_end"] == 0.4
  assert figures["change"] == pytest.approx(0.3)
  assert figures["noise"] == pytest.approx(30 ** 0.5 / 100)
  assert figures["moved"] is True
  assert figures["visit_rate_end"] == 0.95
  assert figures["main_ref_kl_end"] == pytest.approx(0.06)
  assert "| setting | train_accuracy |" in pilot.table({"x": figures})


def test_a_run_without_outcomes_is_named(tmp_path):
  fake_run(tmp_path, "10", "11", 0.5)
  (tmp_path / "all" / "outcomes.jsonl").unlink()
  with pytest.raises(RuntimeError, match="lacks the validation outcomes"):
    pilot.summarise(tmp_path)


@pytest.mark.parametrize("argv, message", [
    (["--settings", "mild_lr3e-4,huge"], "unknown 'huge'"),
    (["--settings", ""], "empty"),
    (["--steps", "3"], "--steps=3: expected an integer >= 5"),
])
def test_bad_arguments_are_named(argv, message, capsys):
  with pytest.raises(SystemExit) as exit_info:
    pilot.parse_args(argv)
  assert exit_info.value.code == 2
  assert message in capsys.readouterr().err
