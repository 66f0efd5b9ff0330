"""A pretrained team before and after training, per data source and seed.

  python -m mgrpo_jax.bench.team_runs [--config=configs/smollm2.py]
      [--seeds=0,1] [--data=synthetic,musique] [--out=runs/team_runs]
      [--finished]   (run nothing: the table of the runs that finished)

For each data source and seed, two runs of `python -m mgrpo_jax.main`, each
its own process:

  untrained  the config with sft.steps=0 and one M-GRPO step: its step-0
             test accuracy is the pretrained model's, with the same data,
             tools and agents as the trained run
  trained    the config as it is: test accuracy at step 0 (after the SFT
             warm start) and at the last step (after M-GRPO)

Data sources: "synthetic" (the config's world) and "musique" (the same
world written as MuSiQue files by data/export.py, trained from the files
with gold demonstrations and the pages the files carry). Each run's wall
time and peak resident memory (of its process) are measured; the table
and out/team_runs.json hold them. A run that finished is not run again
(its record is kept in the JSON); a killed one resumes from its
checkpoints when the command is run again.
"""

from __future__ import annotations

import json
import os
import pathlib
import resource
import subprocess
import sys
import time
from typing import Sequence

from absl import app
from absl import flags

from mgrpo_jax.bench.common import machine

DATA = ("synthetic", "musique")
KINDS = ("untrained", "trained")
RESULT = "team_runs.json"


def measured(command: Sequence[str], log_file: pathlib.Path) -> dict:
  """Runs `command` as this process's only child; its exit code, wall
  seconds and peak resident memory (MiB)."""
  start = time.perf_counter()
  # Unbuffered, so the log shows a long run's progress as it goes.
  env = {**os.environ, "PYTHONUNBUFFERED": "1"}
  with open(log_file, "a", encoding="utf-8") as log:
    code = subprocess.call(list(command), stdout=log,
                           stderr=subprocess.STDOUT, env=env)
  return {"code": code, "seconds": time.perf_counter() - start,
          "peak_mib": resource.getrusage(
              resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def overrides(data: str, kind: str, seed: int, out: pathlib.Path
              ) -> list[str]:
  """The --config flags of one run."""
  flags_ = [f"--config.seed={seed}",
            f"--config.run_dir={out / f'{data}-{kind}-seed{seed}'}"]
  if data == "musique":
    files = out / "world_files" / "musique"
    flags_ += [f"--config.data.{split}={files / f'{split}.jsonl'}"
               for split in ("train", "validation", "test")]
    flags_ += ["--config.sft.demonstrations=gold"]
  if kind == "untrained":
    flags_ += ["--config.sft.steps=0", "--config.train.steps=1",
               "--config.train.eval_every=1"]
  return flags_


def accuracies(run_dir: pathlib.Path) -> dict[int, float]:
  """test/accuracy by step from a run's metrics."""
  path = run_dir / "all" / "metrics.jsonl"
  out = {}
  for line in path.read_text().splitlines():
    record = json.loads(line)
    if "test/accuracy" in record:
      out[int(record["step"])] = float(record["test/accuracy"])
  return out


def row(data: str, seed: int, untrained: dict, trained: dict,
        out: pathlib.Path) -> dict:
  """The table's row of one data source and seed."""
  before = accuracies(out / f"{data}-untrained-seed{seed}")
  after = accuracies(out / f"{data}-trained-seed{seed}")
  return {"data": data, "seed": seed, "untrained": before[0],
          "warm_start": after[0], "mgrpo": after[max(after)],
          "steps": max(after), "seconds": trained["seconds"],
          "peak_gib": max(untrained["peak_mib"], trained["peak_mib"]) / 1024}


def table(rows: Sequence[dict]) -> str:
  """The rows as a markdown table (what team_runs.md holds, as README
  quotes it)."""
  lines = ["| data | seed | untrained | after the warm start | after M-GRPO "
           "| trained run's wall time | peak memory |",
           "|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['data']} | {r['seed']} | {r['untrained']:.3f} | "
                 f"{r['warm_start']:.3f} | {r['mgrpo']:.3f} (step "
                 f"{r['steps']}) | {r['seconds'] / 60:.0f} min | "
                 f"{r['peak_gib']:.1f} GiB |")
  return "\n".join(lines)


def run_all(config: str, seeds: Sequence[int], data: Sequence[str],
            out: pathlib.Path, log=print) -> dict:
  out.mkdir(parents=True, exist_ok=True)
  record_file = out / RESULT
  record = (json.loads(record_file.read_text()) if record_file.is_file()
            else {"machine": machine(), "config": config, "runs": {}})
  if "musique" in data and not (out / "world_files" / "corpus.jsonl").is_file():
    subprocess.check_call([sys.executable, "-m", "mgrpo_jax.data.export",
                           f"--config={config}",
                           f"--out={out / 'world_files'}"])
  for source in data:
    for seed in seeds:
      for kind in KINDS:
        name = f"{source}-{kind}-seed{seed}"
        if record["runs"].get(name, {}).get("code") == 0:
          continue
        log(f"{name}: running (log: {out / (name + '.log')})")
        result = json.loads(subprocess.check_output([
            sys.executable, "-m", "mgrpo_jax.bench.team_runs", "--child",
            f"--out={out / (name + '.log')}", "--",
            sys.executable, "-m", "mgrpo_jax.main", f"--config={config}",
            *overrides(source, kind, seed, out)]))
        record["runs"][name] = result
        record_file.write_text(json.dumps(record, indent=1))
        if result["code"] != 0:
          raise RuntimeError(f"{name} failed (exit {result['code']}); see "
                             f"{out / (name + '.log')}; run the command again "
                             "to resume.")
  rows = [row(source, seed, record["runs"][f"{source}-untrained-seed{seed}"],
              record["runs"][f"{source}-trained-seed{seed}"], out)
          for source in data for seed in seeds]
  record["rows"] = rows
  record_file.write_text(json.dumps(record, indent=1))
  return record


def finished_rows(record: dict, out: pathlib.Path) -> list[dict]:
  """The table's rows of every (data, seed) whose two runs finished, in
  DATA then seed order (what --finished writes; nothing runs)."""
  done = {name for name, r in record["runs"].items() if r.get("code") == 0}
  seeds = sorted({int(n.rsplit("seed", 1)[1]) for n in done})
  return [row(d, s, record["runs"][f"{d}-untrained-seed{s}"],
              record["runs"][f"{d}-trained-seed{s}"], out)
          for d in DATA for s in seeds
          if {f"{d}-untrained-seed{s}", f"{d}-trained-seed{s}"} <= done]


def main(argv):
  config, seeds, data, out, child, finished = _FLAGS
  if child.value:  # Measure the command after "--" as this one's only child.
    print(json.dumps(measured(argv[1:], pathlib.Path(out.value))))
    return
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  try:
    seed_list = [int(s) for s in seeds.value.split(",") if s]
  except ValueError:
    raise app.UsageError(f"--seeds={seeds.value!r}: expected comma-separated "
                         "integers, e.g. 0,1") from None
  sources = [d for d in data.value.split(",") if d]
  unknown = [d for d in sources if d not in DATA]
  if unknown or not sources or not seed_list:
    raise app.UsageError(f"--data={data.value!r}, --seeds={seeds.value!r}: "
                         f"expected data of {list(DATA)} and at least one "
                         "seed")
  if finished.value:  # The table of what finished; nothing runs.
    record_file = pathlib.Path(out.value) / RESULT
    record = json.loads(record_file.read_text())
    record["rows"] = finished_rows(record, pathlib.Path(out.value))
    record_file.write_text(json.dumps(record, indent=1))
  else:
    record = run_all(config.value, seed_list, sources,
                     pathlib.Path(out.value))
  text = table(record["rows"])
  print(f"{config.value}, test accuracy ({record['machine']})")
  print(text)
  (pathlib.Path(out.value) / "team_runs.md").write_text(text + "\n")


if __name__ == "__main__":
  _FLAGS = (flags.DEFINE_string("config", "configs/smollm2.py",
                                "Training config file."),
            flags.DEFINE_string("seeds", "0,1", "Seeds, comma-separated."),
            flags.DEFINE_string("data", ",".join(DATA),
                                f"Data sources, of {', '.join(DATA)}."),
            flags.DEFINE_string("out", "runs/team_runs", "Output folder (the "
                                "child's log file with --child)."),
            flags.DEFINE_bool("child", False, "Internal: measure the "
                              "command after -- ."),
            flags.DEFINE_bool("finished", False, "Run nothing: write the "
                              "table of every data source and seed whose "
                              "runs finished."))
  app.run(main)
