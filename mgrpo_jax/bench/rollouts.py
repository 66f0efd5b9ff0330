"""Batched rollouts against one conversation at a time, in one run.

  python -m mgrpo_jax.bench.rollouts [--questions=8 --rollouts=4]
      [--json=runs/bench_rollouts.json]

The same team (SmolLM2-135M-Instruct as main agent and sub-agent, greedy,
the seeded first turn of configs/evaluate.py) rolls out the same synthetic
questions twice: "batched" lets every agent keep all its conversations live
(questions x rollouts main rows, as many sub rows), "sequential" gives each
agent one row, so conversations run one after another through the same
controller and engine code. Reported: generated tokens, wall seconds,
generated tokens per second, sampler calls, the speed-up, and where the
engines' time went (seconds in prefill, prefix copies and decode; tokens
prefilled and the slots their calls were padded to). Each mode
first runs untimed (compilation: batched on the same questions, sequential
on two of them, its shapes being batch 1 throughout), then timed.
"""

from __future__ import annotations

import json
import pathlib
import time

from absl import app
from absl import flags
import jax

from mgrpo_jax import evaluate
from mgrpo_jax.agents.team import build_team
from mgrpo_jax.core.rewards import reward_weights
from mgrpo_jax.train.evaluator import roll_out
from mgrpo_jax.bench.common import machine
from mgrpo_jax.runtime import logs
from mgrpo_jax.data.corpus import LocalCorpus
from mgrpo_jax.data.loading import load_tasks
from mgrpo_jax.models.loading import load_model

_QUESTIONS = flags.DEFINE_integer("questions", 8, "Synthetic test questions.")
_ROLLOUTS = flags.DEFINE_integer("rollouts", 4, "Rollouts per question; "
                                 "questions x rollouts run concurrently.")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 48, "Tokens per turn.")
_TURNS = flags.DEFINE_integer("turns", 2, "Turns per agent.")
_WARMUP = flags.DEFINE_bool("warmup", True, "Run each mode once untimed.")
_JSON = flags.DEFINE_string("json", "runs/bench_rollouts.json",
                            "Where to write the results as JSON.")


CONFIG = pathlib.Path(__file__).resolve().parents[2] / "configs" / "evaluate.py"


def _config(rows: int, max_new_tokens: int, turns: int):
  config = evaluate.config_from_file(CONFIG)
  config.agents.temperature = 0.0
  for side in ("main", "sub"):
    config.agents[side].rows = rows
    config.agents[side].max_turns = turns
    config.agents[side].max_new_tokens = max_new_tokens
  return config


def _run(mode, config, model, tok, backend, tasks, k, warmup):
  controller = build_team(config.agents, backend, main_model=model,
                          main_tokenizer=tok)
  if warmup:
    start = time.perf_counter()
    controller.run(*warmup, jax.random.key(0))
    print(f"  {mode}: warm-up took {time.perf_counter() - start:.1f} s",
          flush=True)
  engines = list({id(a.policy): a.policy
                  for a in controller.agents.values()}.values())
  before = _engine_counts(engines)
  run = roll_out(controller, tasks, k, jax.random.key(0),
                 reward_weights("mgrpo"))
  engine = {name: value - before[name]
            for name, value in _engine_counts(engines).items()}
  seconds = run.figures["seconds"]
  print(f"  {mode}: timed run took {seconds:.1f} s", flush=True)
  rollouts = run.rollouts
  delegations = sum(len(r.subs) for row in rollouts for r in row)
  result = {"mode": mode, "rows": config.agents.main.rows,
            "generated_tokens": int(run.figures["generated_tokens"]),
            "seconds": seconds,
            "tokens_per_second": run.figures["tokens_per_second"],
            "sampler_calls": dict(controller.calls),
            "delegations": delegations, "engine": engine}
  return result, rollouts


def _engine_counts(engines) -> dict[str, float]:
  """Where the engines' time went so far (summed over the engines):
  seconds in prefill, prefix copies and decode; tokens prefilled, the
  slots their calls padded them to, decode rows x chunks, and the chunks
  that read a shared prefix once (cascade)."""
  counts = {f"{kind}_seconds": sum(e.seconds[kind] for e in engines)
            for kind in ("prefill", "copy", "decode")}
  counts["prefilled_tokens"] = sum(e.prefilled_tokens for e in engines)
  counts["prefill_slots"] = sum(e.prefill_slots for e in engines)
  counts["decoded_rows"] = sum(e.decoded_rows for e in engines)
  counts["cascade_chunks"] = sum(e.cascade_chunks for e in engines)
  return counts


def compare(*, model: str | None = None, questions: int = 8,
            rollouts: int = 4, max_new_tokens: int = 48, turns: int = 2,
            warmup: bool = True, world: dict | None = None) -> dict:
  """Runs both modes on the same questions; returns their figures (and the
  rollouts, under "rollouts", for checks)."""
  config = _config(1, max_new_tokens, turns)
  if world:
    config.world.update(world)
  taskset = load_tasks("synthetic", split="test", limit=questions,
                       world=evaluate.world_config(config))
  backend = LocalCorpus(taskset.documents)
  model, tok = load_model(model or config.model)
  tasks, k = list(taskset.tasks), rollouts
  n = len(tasks) * k
  print(f"{len(tasks)} questions x {k} rollouts on {machine()}", flush=True)
  # Warm-up compiles each mode's shapes: batched on the same questions,
  # sequential (batch 1 throughout) on two of them.
  batched, batched_rollouts = _run(
      "batched", _config(n, max_new_tokens, turns), model, tok, backend,
      tasks, k, (tasks, k) if warmup else None)
  sequential, sequential_rollouts = _run(
      "sequential", _config(1, max_new_tokens, turns), model, tok, backend,
      tasks, k, (tasks[:2], 1) if warmup else None)
  speedup = batched["tokens_per_second"] / sequential["tokens_per_second"]
  return {"machine": machine(), "questions": len(tasks), "rollouts": k,
          "batched": batched, "sequential": sequential, "speedup": speedup,
          "outputs": (batched_rollouts, sequential_rollouts)}


def main(argv):
  del argv
  logs.configure()  # Library INFO lines only with --verbosity=1.
  result = compare(questions=_QUESTIONS.value, rollouts=_ROLLOUTS.value,
                   max_new_tokens=_MAX_NEW.value, turns=_TURNS.value,
                   warmup=_WARMUP.value)
  result.pop("outputs")
  print(f"\n{'mode':<11}{'rows':>5}{'tokens':>8}{'seconds':>9}"
        f"{'tok/s':>8}  sampler calls")
  for r in (result["batched"], result["sequential"]):
    print(f"{r['mode']:<11}{r['rows']:>5}{r['generated_tokens']:>8}"
          f"{r['seconds']:>9.1f}{r['tokens_per_second']:>8.1f}  "
          f"{r['sampler_calls']}")
  print(f"speed-up (tokens/s, batched / sequential): {result['speedup']:.2f}x"
        " (target >= 4x at 32 concurrent rollouts)")
  print(f"\n{'mode':<11}{'prefill s':>10}{'copy s':>8}{'decode s':>10}"
        f"{'prefilled':>11}{'padded to':>11}{'decode rows':>13}")
  for r in (result["batched"], result["sequential"]):
    e = r["engine"]
    print(f"{r['mode']:<11}{e['prefill_seconds']:>10.1f}"
          f"{e['copy_seconds']:>8.1f}{e['decode_seconds']:>10.1f}"
          f"{e['prefilled_tokens']:>11.0f}{e['prefill_slots']:>11.0f}"
          f"{e['decoded_rows']:>13.0f}")
  print("(decode rows: the batch rows of every decode chunk, padding in)")
  out = pathlib.Path(_JSON.value)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
  app.run(main)
