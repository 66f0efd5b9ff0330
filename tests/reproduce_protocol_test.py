"""The pre-registered design: its block in a protocol file, and the check
that refuses a suite the protocol does not describe, before any run."""

import json

import pytest

from mgrpo_jax import reproduce
from mgrpo_jax import reproduce_protocol as protocol


def registered():
  return protocol.design(reproduce.ARMS, reproduce.MAIN_SEEDS,
                         reproduce.PRIMARY)


def write(path, design, blocks=1):
  text = "# Protocol\n\nProse.\n\n" + protocol.block(design) * blocks
  path.write_text(text)
  return path


def runs(arms=None, seeds=None):
  return [(r.name, r.seed) for r in reproduce.plan(
      "main", arms or list(reproduce.ARMS), seeds, quick=False)]


def test_the_registered_suite_passes(tmp_path):
  path = write(tmp_path / "PROTOCOL.md", registered())
  assert protocol.read(path) == registered()
  protocol.check(path, registered(), runs())
  # A subset of its runs (one arm, fewer seeds: a sitting) passes too.
  protocol.check(path, registered(), runs(["mgrpo"], 2))


def test_the_digest_follows_the_config_but_not_run_dir_or_seed():
  digest, steps = protocol.config_digest("full")
  assert steps == 40 and len(digest) == 64
  assert protocol.config_digest("pilot")[0] != digest  # No test split.


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(config_sha256="0" * 64), "config_sha256: the "
     "protocol has '0000"),
    (lambda d: d.update(steps=10), "steps: the protocol has 10"),
    (lambda d: d["arms"]["mgrpo"].update(seeds=3),
     "arms.mgrpo: seed 3 is beyond the protocol's 3 seeds"),
    (lambda d: d["arms"]["mgrpo"]["overrides"].update(mode="single"),
     "arms.mgrpo.overrides: the protocol has"),
    (lambda d: d["arms"].pop("single_agent"),
     "arm 'single_agent': not in the protocol"),
])
def test_a_suite_that_differs_is_refused_naming_what(tmp_path, change,
                                                     message):
  design = registered()
  change(design)
  path = write(tmp_path / "PROTOCOL.md", design)
  with pytest.raises(protocol.ProtocolError, match=message):
    protocol.check(path, registered(), runs())


def test_a_reading_testbed_protocol_must_name_the_novel_fact_endpoint(
    tmp_path):
  from mgrpo_jax.runtime.config_checks import load_config_file
  assert protocol.endpoint_of(load_config_file(
      str(protocol.ROOT / "configs" / "reading.py"))) == "novel_accuracy"
  assert registered()["endpoint"] == "accuracy"  # The first suite's.
  # A suite on a testbed whose warm start demonstrates other worlds.
  planned = {**registered(), "endpoint": "novel_accuracy"}
  old = registered()
  old.pop("endpoint")  # A protocol written before the field.
  with pytest.raises(protocol.ProtocolError,
                     match="names no novel-fact endpoint .endpoint 'accura"):
    protocol.check(write(tmp_path / "old.md", old), planned, runs())
  protocol.check(write(tmp_path / "new.md", planned), planned, runs())
  with pytest.raises(protocol.ProtocolError,
                     match="endpoint 'recall'; expected one of accuracy"):
    protocol.check(write(tmp_path / "bad.md", {**planned,
                                               "endpoint": "recall"}),
                   planned, runs())
  # A first-suite protocol without the field still checks as it did.
  protocol.check(write(tmp_path / "first.md", old), registered(), runs())


def test_a_broken_protocol_file_is_named(tmp_path):
  with pytest.raises(protocol.ProtocolError, match="no such file"):
    protocol.read(tmp_path / "missing.md")
  with pytest.raises(protocol.ProtocolError, match="holds 2"):
    protocol.read(write(tmp_path / "two.md", registered(), blocks=2))
  (tmp_path / "bad.md").write_text("```json protocol\n{nope\n```\n")
  with pytest.raises(protocol.ProtocolError, match="is not JSON"):
    protocol.read(tmp_path / "bad.md")


def test_the_command_refuses_before_any_run(tmp_path, monkeypatch, capsys):
  design = registered()
  design["steps"] = 12
  path = write(tmp_path / "PROTOCOL.md", design)
  monkeypatch.setattr(reproduce.subprocess, "call",
                      lambda *a, **k: pytest.fail("a run started"))
  with pytest.raises(SystemExit) as exit_info:
    reproduce.main(["--out", str(tmp_path / "out"), "--protocol", str(path)])
  assert exit_info.value.code == 2
  assert "steps: the protocol has 12" in capsys.readouterr().err
  assert not (tmp_path / "out").exists()


def test_the_committed_protocol_is_the_suite_as_configured():
  """While the pre-registered suite is pending or being checked, a change
  to its config, arms or seeds must be a deliberate one: this fails on any
  (the command would refuse to run or resume the suite)."""
  assert protocol.PROTOCOL.is_file()
  protocol.check(protocol.PROTOCOL, registered(), runs())
  text = protocol.PROTOCOL.read_text(encoding="utf-8")
  pilot = (protocol.PROTOCOL.parent / "pilot" / "pilot.md").read_text(
      encoding="utf-8")
  assert pilot.strip() in text  # The pilot's table, verbatim.


def test_committed_results_are_the_protocol_s_runs():
  """The committed results.json holds exactly the suite's planned runs
  (arm, seed and steps of the protocol), each with its per-question test
  outcomes at the last step."""
  summary = json.loads(
      (protocol.PROTOCOL.parent / "results.json").read_text())
  planned = {(r.name, r.seed) for r in reproduce.plan(
      "main", list(reproduce.ARMS), None, quick=False)}
  got = [(r["arm"], r["seed"]) for r in summary["runs"]]
  assert sorted(got) == sorted(planned) and len(got) == 28
  for result in summary["runs"]:
    assert result["steps"] == registered()["steps"]
    assert str(result["steps"]) in result["test_outcomes"]
    assert len(result["test_question_hops"]) == len(
        result["test_question_ids"]) == 200
