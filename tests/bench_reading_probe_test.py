"""The capacity probe (bench/reading_probe.py)."""

import json

import pytest

from mgrpo_jax.bench import reading_probe


def test_overrides_reach_the_config():
  config = reading_probe.with_overrides(
      "configs/reading.py", ["sft.worlds=100", "sft.learning_rate=2e-3",
                             "agents.prompt_style=brief"])
  assert (config.sft.worlds, config.sft.learning_rate) == (100, 2e-3)
  assert config.agents.prompt_style == "brief"


def test_sizes_and_their_mistakes():
  assert reading_probe.size_of("256x4") == (256, 4, None)
  assert reading_probe.size_of("384x6@2e-3") == (384, 6, 2e-3)
  for bad in ("256", "255x4", "256x0", "256x4@-1", "axb"):
    with pytest.raises(SystemExit, match="--sizes"):
      reading_probe.size_of(bad)
  with pytest.raises(SystemExit, match="--set 'sft.steps'"):
    reading_probe.main(["--set", "sft.steps", "--sizes", "32x1"])


@pytest.mark.slow
def test_a_quick_probe_runs_and_resumes(tmp_path, monkeypatch):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  args = ["--sizes", "32x1@1e-3", "--config", "configs/reading.py:quick",
          "--out", str(tmp_path / "probe"), "--set", "sft.steps=2"]
  reading_probe.main(args)
  summary = json.loads((tmp_path / "probe" / "probe.json").read_text())
  (result,) = summary["results"]
  assert result["size"] == "32x1_lr1e-3" and result["params_m"] > 0
  assert result["sft_learning_rate"] == 1e-3
  assert result["step_seconds"] > 0 and result["eval/accuracy"] is not None
  assert "--set sft.steps=2" in (tmp_path / "probe" / "probe.md").read_text()
  lengths = summary["name_token_lengths"]
  assert all(v > 1 for v in lengths.values())
  reading_probe.main(args)  # Measured sizes are kept, not run again.
  assert json.loads((tmp_path / "probe" / "probe.json").read_text())[
      "results"] == [result]
