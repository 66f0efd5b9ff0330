"""The first reproduction's recall table (mgrpo_jax/reproduce_recall.py) is
what its committed outcomes say."""

import json
import pathlib

from mgrpo_jax import reproduce_recall
from mgrpo_jax.runtime.config_checks import load_config_file

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "launch/results/reproduce"


def test_the_committed_table_is_the_outcomes_split():
  config = load_config_file(str(ROOT / "configs/reproduce.py") + ":full")
  groups = reproduce_recall.demonstrated_groups(config)
  table = reproduce_recall.recall_table(
      json.loads((RESULTS / "results.json").read_text()), groups)
  assert table == json.loads((RESULTS / "recall.json").read_text())
  assert sum(r["questions"] for r in table["rows"]) == 200
  assert reproduce_recall.markdown(table) in (
      RESULTS / "recall.md").read_text()
  # Recall: the demonstrated one-hop facts are answered ten times as often.
  shown, new = table["rows"][0], table["rows"][1]
  assert shown["warm_start"] > 10 * new["warm_start"]
