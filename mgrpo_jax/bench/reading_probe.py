"""Can a tiny team read? The capacity probe of configs/reading.py.

  python -m mgrpo_jax.bench.reading_probe [--sizes 128x2,256x4@3e-3,...]
      [--out launch/results/reading_probe] [--config configs/reading.py]
      [--steps 1] [--set sft.steps=1500 --set ...]

For each model size (hidden_size x num_layers, optionally @ its SFT
learning rate; `--set` overrides config fields for every size) it runs the
testbed's warm
start (demonstrations of other worlds only, cached) and `--steps` M-GRPO
steps, each in its own `python -m mgrpo_jax.main` process, and reports at
step 0 (the warm start) on validation: the sub-agent's report accuracy
(eval/sub_report_accuracy), the same given it visited a page
(eval/sub_read_accuracy: the probe's figure, every fact novel), its visit
rate, the team's accuracy and the reader's check, with the warm start's
and a step's CPU seconds. A size already measured (its run's
result.json) is kept: a killed probe resumes by the same command.
OUT/probe.json and OUT/probe.md hold the table and the CPU model.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

from mgrpo_jax.bench.common import machine, write_output
from mgrpo_jax.runtime.metrics import MetricsWriter

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIGURES = ("eval/sub_read_accuracy", "eval/sub_report_accuracy",
           "eval/sub_visit_rate", "eval/sub_gradeable", "eval/accuracy",
           "eval/main_delegations_hop2", "eval/main_early_answer",
           "eval/sub_wrong_page", "eval/counterfactual_follows",
           "eval/counterfactual_recalls", "eval/counterfactual_questions")
TARGET = 0.80  # Report accuracy on novel facts from the visited page.


def size_of(text: str) -> tuple[int, int, float | None]:
  """(hidden size, layers, SFT learning rate or None) of HxL[@LR]."""
  shape, _, rate = text.partition("@")
  try:
    hidden, layers = (int(x) for x in shape.split("x"))
    learning_rate = float(rate) if rate else None
  except ValueError:
    raise SystemExit(f"--sizes: {text!r}: expected HIDDENxLAYERS[@LR], e.g. "
                     "256x4@3e-3") from None
  if hidden < 4 or hidden % 4 or layers < 1 or (
      learning_rate is not None and learning_rate <= 0):
    raise SystemExit(f"--sizes: {text!r}: expected a hidden size that is a "
                     "multiple of 4 (the heads), at least one layer and a "
                     "positive learning rate")
  return hidden, layers, learning_rate


def run_size(config: str, out: pathlib.Path, size: str, steps: int,
             overrides: list[str]) -> dict:
  hidden, layers, learning_rate = size_of(size)
  name = size.replace("@", "_lr")
  run_dir = out / "runs" / name
  done = run_dir / "result.json"
  if done.is_file():
    return json.loads(done.read_text())
  command = [sys.executable, "-m", "mgrpo_jax.main", "--config", config,
             f"--config.run_dir={run_dir}",
             f"--config.model.hidden_size={hidden}",
             f"--config.model.num_layers={layers}",
             f"--config.train.steps={steps}",
             f"--config.train.eval_every={max(steps, 1)}",
             *(f"--config.{o}" for o in overrides)]
  if learning_rate is not None:
    command.append(f"--config.sft.learning_rate={learning_rate}")
  run_dir.mkdir(parents=True, exist_ok=True)
  start = time.perf_counter()
  with open(out / "runs" / f"{name}.log", "w") as log:
    code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT,
                           cwd=ROOT)
  if code:
    raise SystemExit(f"reading_probe: the run of {name} failed (exit "
                     f"{code}); see {out / 'runs' / f'{name}.log'}")
  records = MetricsWriter.read(run_dir / "all")
  at = {}
  for record in records:
    at.setdefault(record["step"], {}).update(record)
  result = {"size": name, "hidden_size": hidden, "num_layers": layers,
            "sft_learning_rate": learning_rate, "overrides": overrides,
            "params_m": None, "wall_seconds": time.perf_counter() - start,
            "sft_seconds": at[0].get("time/sft"),
            "step_seconds": at[steps].get("time/step") if steps else None,
            **{f: at[0].get(f) for f in FIGURES}}
  log_text = (out / "runs" / f"{name}.log").read_text()
  for line in log_text.splitlines():
    if "M-parameter model" in line:
      result["params_m"] = float(line.split("SFT of a ")[1].split("M-")[0])
  write_output(str(done), result)
  return result


def with_overrides(config_path: str, overrides: list[str]):
  """The config of `config_path` with `--set` KEY=VALUE overrides (values
  read as Python literals, else kept as strings)."""
  import ast  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.runtime.config_checks import load_config_file  # pylint: disable=g-import-not-at-top
  config = load_config_file(str(ROOT / config_path)
                            if not pathlib.Path(config_path.split(":")[0])
                            .is_absolute() else config_path)
  for override in overrides:
    key, _, text = override.partition("=")
    try:
      value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
      value = text
    *parents, leaf = key.split(".")
    node = config
    for part in parents:
      node = node[part]
    node[leaf] = value
  return config


def name_lengths(config) -> dict[str, float]:
  """Mean ids per entity name for the testbed's tokenizer (trained on the
  demonstration worlds) on their names ("seen") and on the run's world's
  ("unseen"), and for a tokenizer of the run's world alone, the other way
  round: whether an unseen name is a string of byte tokens."""
  from mgrpo_jax.agents import tiny_team  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.data import demo_worlds  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.data.world import WorldConfig, generate_world  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.models import tiny as tiny_model  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.train import warm_start  # pylint: disable=g-import-not-at-top
  vocab = config.model.vocab_size
  run_world = generate_world(WorldConfig(**config.world.to_dict()))
  seen = [generate_world(c)
          for c in warm_start.demonstration_world_configs(config)]
  many = tiny_model.train_tokenizer(tiny_team.with_protocol(
      warm_start.tokenizer_texts(config)), vocab)
  one = tiny_model.train_tokenizer(tiny_team.tokenizer_texts(run_world),
                                   vocab)
  return {"worlds_tokenizer_seen": demo_worlds.name_token_lengths(many, seen),
          "worlds_tokenizer_unseen": demo_worlds.name_token_lengths(
              many, [run_world]),
          "own_tokenizer_seen": demo_worlds.name_token_lengths(
              one, [run_world]),
          "own_tokenizer_unseen": demo_worlds.name_token_lengths(one, seen)}


def table(results: list[dict]) -> str:
  head = ("| size | parameters | sub read accuracy (visited, novel) | "
          "report accuracy | delegations naming a real entity | visit rate | "
          "team accuracy | follows page | recalls | warm start s | step s |"
          "\n|---|---|---|---|---|---|---|---|---|---|---|\n")
  pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"
  sec = lambda v: "-" if v is None else f"{v:.0f}"
  return head + "".join(
      f"| {r['size']} | {r['params_m']}M | "
      f"{pct(r['eval/sub_read_accuracy'])} | "
      f"{pct(r['eval/sub_report_accuracy'])} | "
      f"{pct(r['eval/sub_gradeable'])} | "
      f"{pct(r['eval/sub_visit_rate'])} | {pct(r['eval/accuracy'])} | "
      f"{pct(r['eval/counterfactual_follows'])} | "
      f"{pct(r['eval/counterfactual_recalls'])} | "
      f"{sec(r['sft_seconds'])} | {sec(r['step_seconds'])} |\n"
      for r in results)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sizes", default="128x2,256x4,384x6")
  parser.add_argument("--out", default="launch/results/reading_probe")
  parser.add_argument("--config", default="configs/reading.py")
  parser.add_argument("--steps", type=int, default=1)
  parser.add_argument("--set", action="append", default=[],
                      help="KEY=VALUE: a config field for every size")
  args = parser.parse_args(argv)
  sizes = args.sizes.split(",")
  for size in sizes:
    size_of(size)  # Every size checked before the first run.
  for override in args.set:
    if "=" not in override:
      raise SystemExit(f"--set {override!r}: expected KEY=VALUE, e.g. "
                       "sft.steps=1500")
  out = pathlib.Path(args.out).resolve()
  results = []
  for size in sizes:
    print(f"reading probe: {size} ...", flush=True)
    results.append(run_size(args.config, out, size, args.steps, args.set))
    print(table(results[-1:]), flush=True)
  reads = [r["size"] for r in results
           if (r["eval/sub_read_accuracy"] or 0) >= TARGET]
  lengths = name_lengths(with_overrides(args.config, args.set))
  summary = {"machine": machine(), "config": args.config,
             "target": TARGET, "reads": reads, "results": results,
             "name_token_lengths": lengths}
  write_output(str(out / "probe.json"), summary)
  write_output(str(out / "probe.md"), (
      f"# Capacity probe ({args.config}, step 0 on validation)\n\n"
      f"{machine()}; `python -m mgrpo_jax.bench.reading_probe --sizes "
      f"{args.sizes} --config {args.config}"
      + "".join(f" --set {o}" for o in args.set) + "`\n\n" + table(results)
      + f"\nSizes at or above {TARGET:.0%} read accuracy: "
      f"{', '.join(reads) or 'none'}.\n\nIds per entity name: the testbed's "
      f"tokenizer (the demonstration worlds' text) "
      f"{lengths['worlds_tokenizer_seen']:.2f} on their names, "
      f"{lengths['worlds_tokenizer_unseen']:.2f} on the run's unseen world; "
      f"a tokenizer of the run's world alone "
      f"{lengths['own_tokenizer_seen']:.2f} on its own names, "
      f"{lengths['own_tokenizer_unseen']:.2f} on the demonstration worlds'."
      "\n"))


if __name__ == "__main__":
  os.environ.setdefault("PYTHONUNBUFFERED", "1")
  main()
