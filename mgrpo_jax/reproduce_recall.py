"""What the first reproduction measured: recall, not tool use.

  python -m mgrpo_jax.reproduce_recall [--results
      launch/results/reproduce/results.json] [--out
      launch/results/reproduce/recall]

Splits the committed per-question test outcomes of the pre-registered
suite (every run on the seed-0 world of configs/reproduce.py:full) by
whether each hop's fact was demonstrated to the warm start: a hop is
demonstrated when the same (entity, relation) is a hop of one of the
first `sft.questions` train questions, which the warm start's oracle
played. Each cell is the mean over seeds of a run's accuracy on that group
of questions: the warm start (step 0 of the frozen_sub runs; every arm of a
seed starts from it) and each arm's last evaluation. A team that read its
pages would score about the same on both kinds of fact; the suite's
agents score about ten times better on demonstrated ones.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics

from mgrpo_jax.bench.common import write_output
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.runtime.config_checks import load_config_file

ROOT = pathlib.Path(__file__).resolve().parents[1]
ARMS = ("frozen_sub", "mgrpo")
GROUPS = (("one-hop, fact demonstrated", 1, True),
          ("one-hop, fact never demonstrated", 1, False),
          ("two-hop, every hop demonstrated", 2, True),
          ("two-hop, a hop never demonstrated", 2, False))


def hops_of(task) -> list[tuple[str, str]]:
  """(entity doc id, relation) of each hop of a world question."""
  return list(zip(task.metadata["doc_ids"], task.metadata["relations"]))


def demonstrated_groups(config) -> dict[str, tuple[int, bool]]:
  """Test question id -> (hops, every hop demonstrated)."""
  world = generate_world(WorldConfig(**config.world.to_dict()))
  shown = {hop for task in world.splits["train"][:config.sft.questions]
           for hop in hops_of(task)}
  return {t.task_id: (t.hops, all(h in shown for h in hops_of(t)))
          for t in world.splits["test"]}


def recall_table(results: dict, groups: dict[str, tuple[int, bool]]
                 ) -> dict:
  """{"rows": [{group, questions, warm start, arm...}], "seeds": n}."""
  runs = [r for r in results["runs"] if r["arm"] in ARMS]
  rows = []
  for label, hops, demonstrated in GROUPS:
    row = {"group": label}

    def accuracy(run, step):
      outcomes = run["test_outcomes"][str(step)]
      picked = [outcomes[i] == "1" for i, q in enumerate(
          run["test_question_ids"]) if groups[q] == (hops, demonstrated)]
      row["questions"] = len(picked)
      return sum(picked) / len(picked)

    start = [accuracy(r, 0) for r in runs if r["arm"] == "frozen_sub"]
    row["warm_start"] = statistics.mean(start)
    for arm in ARMS:
      last = [accuracy(r, max(int(s) for s in r["test_outcomes"]))
              for r in runs if r["arm"] == arm]
      row[arm] = statistics.mean(last)
    rows.append(row)
  seeds = len({r["seed"] for r in runs})
  last = max(int(s) for r in runs for s in r["test_outcomes"])
  return {"rows": rows, "seeds": seeds, "last_step": last}


def markdown(table: dict) -> str:
  step = table["last_step"]
  head = (f"| test questions | warm start | frozen_sub, step {step} | "
          f"mgrpo, step {step} |\n|---|---|---|---|\n")
  return head + "".join(
      f"| {r['group']} ({r['questions']}) | {100 * r['warm_start']:.1f}% | "
      f"{100 * r['frozen_sub']:.1f}% | {100 * r['mgrpo']:.1f}% |\n"
      for r in table["rows"])


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--results", default=str(
      ROOT / "launch/results/reproduce/results.json"))
  parser.add_argument("--out", default=str(
      ROOT / "launch/results/reproduce/recall"))
  args = parser.parse_args(argv)
  config = load_config_file(str(ROOT / "configs" / "reproduce.py") + ":full")
  results = json.loads(pathlib.Path(args.results).read_text())
  table = recall_table(results, demonstrated_groups(config))
  write_output(f"{args.out}.json", table)
  write_output(f"{args.out}.md", (
      "# The first reproduction measured recall\n\n"
      "`python -m mgrpo_jax.reproduce_recall`: the committed test outcomes "
      f"of the pre-registered suite (results.json, {table['seeds']} seeds "
      "per arm), split by whether each hop's fact was a hop of one of the "
      "warm start's demonstrated questions (the first "
      f"{config.sft.questions} train questions of the seed-0 world); mean "
      "over seeds.\n\n" + markdown(table)))


if __name__ == "__main__":
  main()
