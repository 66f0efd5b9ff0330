"""The tiny team's SFT warm start, measured:

  python -m mgrpo_jax.bench.sft_study [--steps=300 --eval_every=50
      --entities=300 --train_questions=1000 --max_hops=4
      --json=runs/tiny_warm_start.json --save_dir=DIR]

trains a fresh tiny model (agents/tiny_team.py) on oracle demonstrations of
the world's train split (both agents' trajectories) with train/sft.py and,
every `eval_every` steps, rolls out train and test questions greedily
through the real sampler and controller (train/evaluator.py): format (main
agent), accuracy, sub-agent format and reports stating a gold step answer,
with seconds spent.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from typing import Any

import jax
import ml_collections
import numpy as np
from absl import logging

from mgrpo_jax.agents.demonstrations import demonstrations
from mgrpo_jax.agents.team import build_team
from mgrpo_jax.agents.tiny_team import tiny_agents_config, tiny_team_assets
from mgrpo_jax.agents.trajectory import Rollout
from mgrpo_jax.core.rewards import reward_weights
from mgrpo_jax.data.corpus import LocalCorpus
from mgrpo_jax.data.task import TaskSet
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.models.build import init_model
from mgrpo_jax.models.hf_checkpoint import save_hf_checkpoint
from mgrpo_jax.models.tokenizer import Tokenizer
from mgrpo_jax.train.evaluator import roll_out
from mgrpo_jax.runtime.config_checks import load_config_file
from mgrpo_jax.train.sft import SFTTrainer, batches, sft_learner_config

# The learner section SFT starts from (its optimizer settings).
DEFAULT_CONFIG = (pathlib.Path(__file__).resolve().parents[2] / "configs"
                  / "default.py")


def greedy_eval(model: Any, tokenizer: Tokenizer, taskset: TaskSet,
                agents: ml_collections.ConfigDict, *, seed: int = 0
                ) -> tuple[list[list[Rollout]], dict[str, float]]:
  """Rolls out every task once with the real sampler (`build_team`, one
  model for every agent) and returns (rollouts [B][1], figures of
  train/evaluator.py: format, accuracy, sub_format, sub_expert (reports
  stating a gold step answer), sub_calls, seconds)."""
  controller = build_team(agents, LocalCorpus(taskset.documents),
                          main_model=model, main_tokenizer=tokenizer)
  run = roll_out(controller, list(taskset.tasks), 1, jax.random.key(seed),
                 reward_weights("mgrpo"))
  figures = {"sub_format": 0.0, "sub_expert": 0.0, **run.figures}
  return run.rollouts, figures


def warm_start_tiny_team(world_config: WorldConfig, *, steps: int = 300,
                         batch_size: int = 8, learning_rate: float = 3e-3,
                         noise: float = 0.0, early_answer: float = 0.0,
                         lazy_report: float = 0.0,
                         seed: int = 0, eval_every: int = 50,
                         eval_questions: int = 16,
                         vocab_size: int = 2048,
                         cache_dir: str | os.PathLike | None = None,
                         agents: ml_collections.ConfigDict | None = None,
                         save_dir: str | os.PathLike | None = None,
                         **model_overrides) -> dict[str, Any]:
  """SFT of a fresh tiny model on oracle demonstrations of the world's
  train split, with greedy rollouts (train and test questions) every
  `eval_every` steps; returns the measurements (losses, seconds, figures,
  the first question's transcript per evaluation). With `save_dir`, the
  trained model and its tokenizer are saved there as a Hugging Face
  checkpoint (`models.load_model` reads it)."""
  agents = agents or tiny_agents_config()
  tokenizer, config = tiny_team_assets(
      world_config, cache_dir=cache_dir, vocab_size=vocab_size,
      max_position_embeddings=agents.main.context_tokens, **model_overrides)
  world = generate_world(world_config)
  train = world.task_set("train")
  demos = demonstrations(train, tokenizer, noise=noise,
                         early_answer=early_answer, lazy_report=lazy_report,
                         seed=seed, agents=agents)
  evals = {split: TaskSet(f"{split}[:{eval_questions}]",
                          world.splits[split][:eval_questions],
                          world.documents) for split in ("train", "test")}
  model = init_model(config, seed=seed)
  learner = load_config_file(DEFAULT_CONFIG).learner.main.to_dict()
  trainer = SFTTrainer(model, sft_learner_config(
      learner, steps=steps, batch_size=min(batch_size, 4),
      learning_rate=learning_rate, max_len=agents.main.context_tokens))
  out: dict[str, Any] = {
      "model_params": config.num_params, "vocab_size": tokenizer.vocab_size,
      "demonstrations": len(demos),
      "demo_tokens": int(sum(len(d.tokens) for d in demos)),
      "losses": [], "accuracy": [], "evals": [], "sft_seconds": 0.0}
  rng = np.random.default_rng(seed)
  for step, index in enumerate(batches(len(demos), batch_size, steps, rng)):
    start = time.perf_counter()
    metrics = trainer.step([demos[i] for i in index])
    out["sft_seconds"] += time.perf_counter() - start
    out["losses"].append(metrics["loss"])
    out["accuracy"].append(metrics["accuracy"])
    if (step + 1) % eval_every == 0 or step + 1 == steps:
      record = {"step": step + 1, "loss": metrics["loss"],
                "sft_seconds": out["sft_seconds"]}
      for split, taskset in evals.items():
        rollouts, figures = greedy_eval(trainer.model(), tokenizer, taskset,
                                        agents, seed=seed)
        record[split] = figures
        record[f"{split}_transcript"] = rollouts[0][0].to_json()
      out["evals"].append(record)
      logging.info("step %d: %s", step + 1,
                   {k: v for k, v in record.items() if "transcript" not in k})
  if save_dir is not None:
    save_hf_checkpoint(trainer.model(), tokenizer, save_dir)
  return out


def _define_flags() -> dict[str, Any]:
  from absl import flags  # pylint: disable=g-import-not-at-top
  return dict(
      steps=flags.DEFINE_integer("steps", 300, "SFT steps."),
      batch_size=flags.DEFINE_integer("batch_size", 8,
                                      "Trajectories per step."),
      learning_rate=flags.DEFINE_float("learning_rate", 3e-3,
                                       "Peak learning rate."),
      noise=flags.DEFINE_float("noise", 0.0, "Oracle mistakes per turn."),
      early_answer=flags.DEFINE_float(
          "early_answer", 0.0, "Share of multi-hop demonstrations answered "
          "after the first hop."),
      lazy_report=flags.DEFINE_float(
          "lazy_report", 0.0, "Share of hops demonstrated without the "
          "visit (reported from the search snippet)."),
      seed=flags.DEFINE_integer("seed", 0, "World, model and data seed."),
      eval_every=flags.DEFINE_integer("eval_every", 50,
                                      "Steps between greedy evaluations."),
      eval_questions=flags.DEFINE_integer("eval_questions", 16,
                                          "Questions per evaluated split."),
      entities=flags.DEFINE_integer("entities", 300, "World entities."),
      train_questions=flags.DEFINE_integer("train_questions", 1000,
                                           "Demonstrated train questions."),
      max_hops=flags.DEFINE_integer("max_hops", 4,
                                    "Most hops a question needs."),
      hidden_size=flags.DEFINE_integer("hidden_size", 128, "Model width D."),
      num_layers=flags.DEFINE_integer("num_layers", 2, "Layers L."),
      json=flags.DEFINE_string("json", "runs/tiny_warm_start.json",
                               "Where the measurements are written."),
      save_dir=flags.DEFINE_string("save_dir", None, "Where the trained "
                                   "model is saved (HF checkpoint); none if "
                                   "unset."))


def main(f: dict[str, Any]) -> None:
  """Warm-starts the tiny team as the flags say; writes the measurements
  as JSON and prints one line per evaluation."""
  world = WorldConfig(num_entities=f["entities"].value,
                      train_questions=f["train_questions"].value,
                      validation_questions=16, test_questions=64,
                      max_hops=f["max_hops"].value, seed=f["seed"].value)
  out = warm_start_tiny_team(
      world, steps=f["steps"].value, batch_size=f["batch_size"].value,
      learning_rate=f["learning_rate"].value, noise=f["noise"].value,
      early_answer=f["early_answer"].value,
      lazy_report=f["lazy_report"].value,
      seed=f["seed"].value, eval_every=f["eval_every"].value,
      eval_questions=f["eval_questions"].value,
      hidden_size=f["hidden_size"].value, num_layers=f["num_layers"].value,
      save_dir=f["save_dir"].value)
  path = pathlib.Path(f["json"].value)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(out, indent=1) + "\n")
  for r in out["evals"]:
    print(f"step {r['step']:>5}  loss {r['loss']:.3f}  sft "
          f"{r['sft_seconds']:.0f} s  " + "  ".join(
              f"{s}: format {r[s]['format']:.2f} acc {r[s]['accuracy']:.2f} "
              f"sub_format {r[s]['sub_format']:.2f} sub_expert "
              f"{r[s]['sub_expert']:.2f}" for s in ("train", "test")))


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  _flags = _define_flags()
  app.run(lambda argv: main(_flags))
