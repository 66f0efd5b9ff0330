"""The trainer's SFT warm start: one model every agent starts from, cached.

Before M-GRPO, the tiny from-scratch model learns the protocol from oracle
demonstrations (agents/oracle.py) of the run's train questions: every
agent's trajectories (main and sub-agent, or the single agent), so one SFT
serves the whole team, as a pretrained checkpoint would. Each agent then
trains its own copy on its own mesh; nothing is shared after this point.

The result is saved as a Hugging Face checkpoint (+ the SFT figures) under
`<cache root>/warm_starts/<key>`, where the key hashes everything the
weights depend on (model, world, SFT settings, agents' budgets, mode,
seed). A later run with the same settings (a baseline config, a new seed
of the RL phase, a restarted notebook) loads it instead of training again;
`config.sft.cache=False` always trains afresh. The weights are always read
back from the saved files, so a cached and a fresh warm start give the run
bit-identical parameters.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import time
from typing import Any, Callable, Sequence

import ml_collections

from mgrpo_jax.agents.team import KINDS
from mgrpo_jax.agents.oracle import gold_steps
from mgrpo_jax.data import demo_worlds
from mgrpo_jax.data.corpus import Document
from mgrpo_jax.data.novelty import NOBODY, Novelty
from mgrpo_jax.data.records import DataError
from mgrpo_jax.data.task import Task, TaskSet
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.models.build import init_model
from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.models.hf_checkpoint import save_hf_checkpoint
from mgrpo_jax.models.tokenizer import Tokenizer
from mgrpo_jax.agents import demo_file, demonstrations
from mgrpo_jax.runtime.cache import cache_root, write_entry
from mgrpo_jax.train import sft
from mgrpo_jax.train.data import data_section, file_digest
from mgrpo_jax.train.data import identity as data_identity
from mgrpo_jax.train.learner import LearnerConfig
from mgrpo_jax.agents import tiny_team as tiny

CACHE_DIR = "warm_starts"  # Under the cache root.
VERSION = 2  # Bump when the demonstrations or the SFT recipe change.
FIGURES = "sft.json"
# The rollouts' sampling settings, left out of the key (the oracle plays
# greedily; `sampler_dtype` added later keeps earlier entries' keys).
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "sampler_dtype")
# The fields of `learner.main` SFT's optimizer takes (sft.sft_learner_config
# replaces the others with SFT's own).
SFT_LEARNER_FIELDS = ("weight_decay", "clip_norm", "b1", "b2")
# config.sft.demonstrations: who writes the demonstrations (or the path of
# a file of conversations, agents/demo_file.py).
ORACLE = "oracle"  # The synthetic world's oracle (agents/oracle.py).
GOLD = "gold"  # What the data's records carry (oracle.gold_steps).
DEMONSTRATIONS = (ORACLE, GOLD)
# config.sft's fields of the demonstration worlds (data/demo_worlds.py).
WORLDS_FIELDS = ("worlds", "world_seed")


def demonstration_source(config: ml_collections.ConfigDict) -> str:
  """config.sft.demonstrations (the oracle for a config without it)."""
  return config.sft.get("demonstrations", ORACLE)


def check_demonstrations(config: ml_collections.ConfigDict,
                         train: Sequence[Task],
                         documents: Sequence[Document]) -> None:
  """Before any compute: each train question the warm start demonstrates
  (the first sft.questions) carries what config.sft.demonstrations needs,
  else a DataError naming the question, the field and the way out."""
  if not config.sft.steps:
    return
  if config.sft.get("worlds", 0):
    world = generate_world(WorldConfig(**config.world.to_dict()))
    try:
      demo_worlds.check_disjoint(
          world, demonstrated_tasksets(config, TaskSet("sft", ())),
          setting=(f"config.sft.worlds={config.sft.worlds}, "
                   f"sft.world_seed={config.sft.world_seed}, "
                   f"world.seed={config.world.seed}, seed={config.seed}"))
    except demo_worlds.LeakError as e:
      raise DataError(str(e)) from None
    return
  source = demonstration_source(config)
  if source not in DEMONSTRATIONS:  # A file: read and checked now.
    from mgrpo_jax.train.team_build import agents_section  # pylint: disable=g-import-not-at-top
    try:
      demo_file.read_conversations(source, agents_section(config))
    except DataError as e:
      raise DataError(f"config.sft.demonstrations={source!r}: {e}") from None
    return
  pages = {d.doc_id: d.text for d in documents}
  where = f"config.data.train={data_section(config)['train']!r}"
  for task in train[:config.sft.questions]:
    if source == ORACLE and not task.sub_questions:
      raise DataError(
          f"{where}: task {task.task_id!r} has no question_decomposition "
          "(sub_questions); config.sft.demonstrations='oracle' plays each "
          "question's decomposition: expected 'gold' (which also plays "
          "from supporting pages), a file with decompositions, or "
          "sft.steps=0.")
    if source == GOLD:
      try:
        gold_steps(task, pages)
      except ValueError as e:
        raise DataError(f"{where}: {e}") from None


def warm_start_key(config: ml_collections.ConfigDict) -> str:
  """Changes with anything the warm-started weights depend on."""
  sft_section = {k: v for k, v in config.sft.to_dict().items()
                 if k != "cache"}
  # Demonstrating the run's own questions is what every entry before the
  # demonstration worlds was keyed on.
  if not sft_section.get("worlds"):
    for field in WORLDS_FIELDS:
      sft_section.pop(field, None)
  # The oracle's demonstrations are what every entry before the field was
  # keyed on: left out, those entries stay valid.
  if sft_section.get("demonstrations") == ORACLE:
    del sft_section["demonstrations"]
  elif sft_section.get("demonstrations") not in (None, GOLD):
    sft_section["demonstrations_sha256"] = file_digest(
        sft_section["demonstrations"])
  # The oracle plays greedily: the rollouts' sampling settings do not
  # change its demonstrations.
  agents = {k: v for k, v in config.agents.to_dict().items()
            if k not in SAMPLING_FIELDS}
  # The oracle plays the main agent and the "sub" kind only, always with
  # both tools: the other kinds' settings do not change its demonstrations
  # (and leaving them out keeps the keys of earlier versions' entries).
  for name in ("sub_kinds", *[k for k in KINDS if k != "sub"]):
    agents.pop(name, None)
  agents["sub"] = {k: v for k, v in agents["sub"].items() if k != "tools"}
  # Whether the samplers share one copy of the base weights changes where
  # the weights live, not what SFT learns (and, left out, keeps the keys of
  # the entries made before the field).
  agents.pop("share_base", None)
  # The oracle opens one attempt per delegation; more attempts change the
  # RL rollouts, not the demonstrations.
  agents.pop("sub_branches", None)
  blob = json.dumps({
      "model": config.model.to_dict(), "world": config.world.to_dict(),
      "sft": sft_section, "agents": agents,
      # SFT takes these of the main learner's section (sft_settings); the
      # RL-only fields (learning rate, clipping, KL, ...) leave the key, so
      # runs that differ only in how they train after the warm start share it.
      "learner": {k: config.learner.main[k] for k in SFT_LEARNER_FIELDS},
      "layout": "single" if config.mode == "single" else "multi",
      # The tokenizer changes with the world and the protocol texts.
      "tokenizer": tiny.tokenizer_key(WorldConfig(**config.world.to_dict()),
                                      config.model.vocab_size),
      "seed": config.seed, "version": VERSION,
      **data_identity(config)}, sort_keys=True)
  return hashlib.sha256(blob.encode()).hexdigest()[:16]


def sft_settings(config: ml_collections.ConfigDict,
                 model_config: ModelConfig,
                 max_len: int | None = None) -> LearnerConfig:
  """The warm start's optimizer: the main agent's learner section with
  SFT's steps, batch and learning rate (sft.sft_learner_config)."""
  return sft.sft_learner_config(
      config.learner.main.to_dict(), steps=config.sft.steps,
      batch_size=config.sft.batch_size,
      learning_rate=config.sft.learning_rate,
      max_len=max_len or model_config.max_position_embeddings)


def warm_start_dir(config: ml_collections.ConfigDict) -> pathlib.Path:
  return cache_root() / CACHE_DIR / warm_start_key(config)


def demonstrated_tasksets(config: ml_collections.ConfigDict,
                          taskset: TaskSet) -> list[TaskSet]:
  """What the oracle plays: `taskset` (the run's first sft.questions train
  questions), or with sft.worlds > 0 that many questions of the
  demonstration worlds (data/demo_worlds.py), one TaskSet per world."""
  worlds = config.sft.get("worlds", 0)
  if not worlds:
    return [taskset]
  return demo_worlds.tasksets(demonstration_world_configs(config),
                              config.sft.questions)


def demonstration_world_configs(config: ml_collections.ConfigDict
                                ) -> list[WorldConfig]:
  """The demonstration worlds of a run with sft.worlds > 0."""
  return demo_worlds.world_configs(
      WorldConfig(**config.world.to_dict()), worlds=config.sft.worlds,
      questions=config.sft.questions, first_seed=config.sft.world_seed,
      run_seed=config.seed)


def demonstration_trajectories(config: ml_collections.ConfigDict,
                               taskset: TaskSet, tokenizer: Tokenizer,
                               agents: ml_collections.ConfigDict
                               ) -> tuple[list, str, int]:
  """(the warm start's trajectories, what they are in words, gold steps
  whose page the search missed). Deterministic: the same config gives the
  same trajectories (data/novelty.py replays them)."""
  # The oracle demonstrates the "sub" kind; every kind starts from the
  # model that learned it (a kind's own protocol is the same: tools, report).
  agents = ml_collections.ConfigDict(agents.to_dict())
  agents.sub_kinds = ("sub",)
  source = demonstration_source(config)
  if source not in DEMONSTRATIONS:
    demos = demo_file.render(demo_file.read_conversations(source, agents),
                             tokenizer, agents)
    return demos, f"conversations of {source}", 0
  demos, misses = [], 0
  played = demonstrated_tasksets(config, taskset)
  for i, tasks in enumerate(played):
    knowledge = demonstrations.Knowledge(tasks, gold=source == GOLD)
    demos += demonstrations.demonstrations(
        tasks, tokenizer, layout=agents.layout, noise=config.sft.noise,
        early_answer=config.sft.early_answer,
        lazy_report=config.sft.lazy_report, seed=config.seed + i,
        agents=agents, knowledge=knowledge)
    misses += knowledge.misses
  questions = sum(len(t.tasks) for t in played)
  what = (f"{source} trajectories of {questions} questions"
          + (f" of {len(played)} demonstration worlds (none of the run's)"
             if config.sft.get("worlds", 0) else "")
          + (f" ({misses} sub-agent searches did not find their "
             "supporting page: those reports say 'unknown')"
             if misses else ""))
  return demos, what, misses


def tokenizer_texts(config: ml_collections.ConfigDict) -> list[str] | None:
  """What the tiny tokenizer learns from, with sft.worlds > 0: the
  demonstration worlds' pages and questions (the run's world stays unseen,
  as new to the tokenizer as to the model); None: the run's own world."""
  if not config.sft.get("worlds", 0) or not config.sft.steps:
    return None
  return [text for tasks in demo_worlds.tasksets(
      demonstration_world_configs(config), config.sft.questions)
          for text in tiny.data_texts(tasks.documents, tasks.tasks)]


def novelty(config: ml_collections.ConfigDict, taskset: TaskSet,
            tokenizer: Tokenizer, agents: ml_collections.ConfigDict
            ) -> Novelty:
  """Which questions' facts the warm start never showed (data/novelty.py):
  its demonstrations replayed (they take about a second), nothing
  demonstrated without SFT."""
  if not config.sft.steps:
    return NOBODY
  demos, _, _ = demonstration_trajectories(config, taskset, tokenizer,
                                           agents)
  return Novelty.of_trajectories(demos, tokenizer)


def warm_started(config: ml_collections.ConfigDict, taskset: TaskSet,
                 tokenizer: Tokenizer, model_config: ModelConfig,
                 agents: ml_collections.ConfigDict, *,
                 log: Callable[[str], None] = print,
                 initial: Callable[[], Any] | None = None
                 ) -> tuple[pathlib.Path, dict[str, float]]:
  """(checkpoint directory, SFT figures): trained now, or found in the
  cache. `taskset` holds the train questions and corpus the oracle plays;
  `agents` is the team's config section (its layout says which agents)."""
  directory = warm_start_dir(config)
  found = (directory / FIGURES).is_file()
  if config.sft.cache and found:
    figures = json.loads((directory / FIGURES).read_text())
    log(f"warm start: reusing {directory} (SFT of {figures['sft/steps']:.0f} "
        "steps with these settings ran before; config.sft.cache=False "
        "trains afresh)")
    return directory, {**figures, "sft/cached": 1.0}
  start = time.perf_counter()
  layout = agents.layout
  # The oracle demonstrates the "sub" kind; every kind starts from the
  # model that learned it (a kind's own protocol is the same: tools, report).
  demos, what, misses = demonstration_trajectories(config, taskset,
                                                   tokenizer, agents)
  log(f"warm start: SFT of a {model_config.num_params / 1e6:.2f}M-parameter "
      f"model on {len(demos)} {what}, {config.sft.steps} steps")

  def progress(step: int, metrics: dict[str, float]) -> None:
    if (step + 1) % max(config.sft.steps // 10, 1) == 0:
      log(f"warm start: SFT step {step + 1}/{config.sft.steps}, loss "
          f"{metrics['loss']:.3f}, token accuracy {metrics['accuracy']:.3f}")

  model = (initial() if initial is not None
           else init_model(model_config, seed=config.seed))
  # Sequences as long as the agents' longest context (a pretrained model's
  # positions reach further than any conversation).
  longest = max(agents[name].context_tokens for name in ("main", "sub"))
  model, losses = sft.warm_start(
      model, demos, steps=config.sft.steps,
      batch_size=config.sft.batch_size, seed=config.seed,
      config=sft_settings(config, model_config,
                          min(longest, model_config.max_position_embeddings)),
      on_step=progress)
  figures = {"sft/steps": float(config.sft.steps),
             "sft/demonstrations": float(len(demos)),
             "sft/loss_first": float(losses[0]),
             "sft/loss_last": float(losses[-1]),
             "time/sft": time.perf_counter() - start}
  if demonstration_source(config) == GOLD:
    figures["sft/gold_misses"] = float(misses)
  _save(model, tokenizer, figures, directory, replace=found)
  return directory, {**figures, "sft/cached": 0.0}


def _save(model: Any, tokenizer: Tokenizer, figures: dict[str, float],
          directory: pathlib.Path, *, replace: bool) -> None:
  """Writes the checkpoint beside `directory` and renames it into place
  (runtime/cache.py): a reader never sees half a warm start; the entry this
  run found and chose to retrain (cache=False) is replaced (`replace`); one
  another process finished while this one trained wins (it may be reading
  it: two roles of one run warm-start at once)."""

  def build(folder: pathlib.Path) -> None:
    save_hf_checkpoint(model, tokenizer, folder)
    (folder / FIGURES).write_text(json.dumps(figures, indent=1) + "\n")

  write_entry(directory, build, is_complete=lambda d: (d / FIGURES).is_file(),
              replace=replace)
