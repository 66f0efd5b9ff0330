"""Evaluates an agent team: `python -m mgrpo_jax.evaluate --config ...`.

  python -m mgrpo_jax.evaluate --config configs/evaluate.py \
      [--checkpoint MODEL] [--sub_checkpoint MODEL] \
      [--data synthetic | FILE] [--format FORMAT] [--corpus CORPUS.jsonl] \
      [--output_dir DIR]

Rolls out every question K times (`config.eval.rollouts`) with the team of
`config.agents`, scores the rollouts, and writes to the output directory:
  transcripts.jsonl  one line per rollout as it finishes: the question, gold
                     answers, correctness and the main agent's turns with
                     each delegated sub-agent conversation nested inside
  metrics.json       pass@1, avg@k, pass@k, format rate, sub-agent calls and
                     tokens, overall and by level / hops (agents/report.py);
                     with the web backend (`config.tools.backend="web"`,
                     agents/web.py) also tools/errors/<kind> and the
                     search, visit, cache and HTTP counts
A progress bar counts finished rollouts. MODEL is a registered name, a
checkpoint directory, a .gguf file (default: `config.model`), or a training
run's Orbax checkpoints, `<run_dir>/checkpoints/main` (newest step) or
`.../main/<step>`; the sub-agent then defaults to the same run's `sub` at
the same step. With a training config it evaluates as the trainer does
(greedy, one rollout per validation question; `--data synthetic:test`
evaluates the test split instead, all of it unless `train.test_questions`
names a number), through the trainer's own evaluator (train/evaluator.py).
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import sys
from typing import Any

from absl import app
from absl import flags
from absl import logging
import jax
import ml_collections
from ml_collections import config_flags
import tqdm

from mgrpo_jax.agents import report
from mgrpo_jax.agents.rewards import is_correct
from mgrpo_jax.agents.team import build_team
from mgrpo_jax.agents.tools import SearchBackend
from mgrpo_jax.agents.web import WebBackend, check_tools_config
from mgrpo_jax.data.loading import load_corpus, load_tasks
from mgrpo_jax.data.world import WorldConfig
from mgrpo_jax.runtime import config_checks
from mgrpo_jax.runtime import logs
from mgrpo_jax.train.data import search_backend
from mgrpo_jax.train.reading import training_novelty
from mgrpo_jax.train.evaluator import roll_out, weights_of

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a config file with get_config() "
    "(e.g. configs/evaluate.py).", lock_config=True)
_DATA = flags.DEFINE_string("data", "synthetic",
                            "'synthetic' (the generated world, split from "
                            "config.eval.split), 'synthetic:<split>' "
                            "(train, validation or test) or a benchmark "
                            "file.")
_FORMAT = flags.DEFINE_string("format", None,
                              "File format when detection is not wanted: "
                              "gaia, webwalkerqa, xbench, hotpotqa, musique.")
_CORPUS = flags.DEFINE_string("corpus", None,
                              "JSONL corpus ({id, title, text} per line) for "
                              "data that carries no documents (GAIA, ...).")
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "Main agent's model (default config.model), or a "
    "training run's <run_dir>/checkpoints/main[/<step>].")
_SUB_CHECKPOINT = flags.DEFINE_string(
    "sub_checkpoint", None, "Sub-agent's model (default: the run's "
    "checkpoints/sub beside --checkpoint, else config.sub_model, else the "
    "main agent's).")
_OUTPUT_DIR = flags.DEFINE_string(
    "output_dir", None, "Where transcripts and metrics go (default "
    "eval_runs/<data>-<time>); must not already hold transcripts.")


def config_from_file(path: str | os.PathLike) -> ml_collections.ConfigDict:
  """`get_config()` of a config file (what --config reads)."""
  return config_checks.load_config_file(str(path))


def world_config(config: ml_collections.ConfigDict) -> WorldConfig:
  return WorldConfig(**config.world.to_dict())


def from_training_config(config: ml_collections.ConfigDict, *,
                         split: str = "validation"
                         ) -> ml_collections.ConfigDict:
  """An evaluation config for a training config (configs/default.py and
  its baselines): the run's world, tools, team (train/team_build.py, as
  the trainer builds it) and reward, greedy, one rollout per question of
  `split`: as many validation questions as the trainer's eval/accuracy, or
  test questions as its test/accuracy (all of them if it logs none).
  Configs that already have an `eval` section are returned unchanged."""
  if "eval" in config or "train" not in config:
    return config
  from mgrpo_jax.train.team_build import agents_section  # pylint: disable=g-import-not-at-top
  out = ml_collections.ConfigDict()
  out.seed = 0
  out.model = config.model.name
  out.sub_model = None
  out.agents = agents_section(config)
  out.agents.temperature = 0.0
  limit = {"validation": config.train.eval_questions,
           "test": config.train.test_questions}.get(split, 0)
  out.eval = ml_collections.ConfigDict(
      {"rollouts": 1, "limit": limit, "split": split})
  out.reward = ml_collections.ConfigDict(config.reward.to_dict())
  out.world = ml_collections.ConfigDict(config.world.to_dict())
  if "tools" in config:  # The backend the run trained with.
    out.tools = ml_collections.ConfigDict(config.tools.to_dict())
  return out


def run_data(config: ml_collections.ConfigDict, data: str,
             data_format: str | None, corpus: str | None
             ) -> tuple[str, str | None, str | None]:
  """(data, format, corpus) to evaluate. A training config whose
  validation split is a file (`config.data.validation`) evaluates that file
  when --data is left at "synthetic", with the run's format and corpus
  file unless given: what the run's eval/* measured. Anything else is
  returned as given ("synthetic:validation" names the world's split)."""
  if "train" not in config or "data" not in config or data != "synthetic":
    return data, data_format, corpus
  section = config.data
  if section.validation == "synthetic":
    return data, data_format, corpus
  if corpus is None and section.corpus != "files":
    corpus = section.corpus
  return section.validation, data_format or section.format or None, corpus


def _named_split(data: str) -> str | None:
  """The split a `synthetic:<split>` name gives (None for any other)."""
  name, _, split = str(data).partition(":")
  return split or None if name == "synthetic" else None


def _load(name: str):
  """(model, tokenizer) of a model name, HF directory, .gguf file or a
  training run's <run_dir>/checkpoints/<agent>[/<step>]."""
  # jax-heavy: imported late.
  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.models.loading import load_model
  from mgrpo_jax.train import trained
  if trained.is_trained_checkpoint(name):
    model, tok, step = trained.load_trained(name)
    logs.say(f"loaded {name}: the trained weights of step {step}")
    return model, tok
  return load_model(name)


def _sibling_sub(checkpoint: str | None) -> str | None:
  """<run>/checkpoints/sub[/<step>] beside a run's main checkpoint."""
  from mgrpo_jax.train import trained  # pylint: disable=g-import-not-at-top
  if checkpoint is None or not trained.is_trained_checkpoint(checkpoint):
    return None
  agent_dir, step = trained.split_step(checkpoint)
  sub = agent_dir.parent / "sub"
  if agent_dir.name != "main" or not sub.is_dir():
    return None
  return str(sub) if step is None else str(sub / str(step))


def _load_models(config, checkpoint, sub_checkpoint):
  main_name = checkpoint or config.model
  main_model, main_tok = _load(main_name)
  sub_name = (sub_checkpoint or _sibling_sub(checkpoint) or config.sub_model
              or main_name)
  if config.agents.layout == "single" or sub_name == main_name:
    return main_model, main_tok, None, None
  sub_model, sub_tok = _load(sub_name)
  return main_model, main_tok, sub_model, sub_tok


def _search_backend(config: ml_collections.ConfigDict, name: str, taskset,
                    data: str, corpus: str | None) -> SearchBackend:
  """The backend `config.tools.backend` names: "local" (BM25 over --corpus
  or the data's own documents) or "web" (agents/web.py)."""
  if name == "web":
    if corpus:
      raise ValueError(f"--corpus={corpus!r} with config.tools.backend="
                       "'web': the web backend searches the web, not a "
                       "corpus; drop --corpus or set "
                       "--config.tools.backend=local.")
    return search_backend(config, (), "the web")
  documents = load_corpus(corpus) if corpus else taskset.documents
  if not documents:
    raise ValueError(f"--data={data!r} carries no documents to search; pass "
                     "--corpus with a JSONL corpus ({id, title, text} per "
                     "line), or search the web with "
                     "--config.tools.backend=web.")
  return search_backend(config, documents, str(corpus or data))


def _output_dir(path: str | None, data: str) -> pathlib.Path:
  if path is None:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = os.path.join("eval_runs",
                        f"{pathlib.Path(str(data)).stem}-{stamp}")
  out = pathlib.Path(path)
  if (out / "transcripts.jsonl").exists():
    raise ValueError(f"--output_dir={str(out)!r} already holds "
                     "transcripts.jsonl; choose a new directory (nothing is "
                     "overwritten).")
  out.mkdir(parents=True, exist_ok=True)
  return out


def evaluate(config: ml_collections.ConfigDict, *, data: str = "synthetic",
             data_format: str | None = None, corpus: str | None = None,
             checkpoint: str | None = None,
             sub_checkpoint: str | None = None,
             output_dir: str | None = None,
             progress: bool = True) -> dict[str, Any]:
  """Runs the evaluation described in the module docstring; returns metrics.
  A training config is evaluated as `from_training_config` says."""
  data, data_format, corpus = run_data(config, data, data_format, corpus)
  named = _named_split(data)
  training = config if "sft" in config and data.startswith("synthetic") else (
      None)
  config = from_training_config(config, split=named or "validation")
  backend_name = check_tools_config(config)
  k = config.eval.rollouts
  if not isinstance(k, int) or k < 1:
    raise ValueError(f"config.eval.rollouts={k!r}: expected a positive "
                     "integer (rollouts per question).")
  limit = config.eval.limit or None
  # A split named in --data ("synthetic:test") wins over config.eval.split.
  taskset = load_tasks(data, split=None if named else config.eval.split,
                       format=data_format, limit=limit,
                       world=world_config(config))
  backend = _search_backend(config, backend_name, taskset, data, corpus)
  out = _output_dir(output_dir, data)
  main_model, main_tok, sub_model, sub_tok = _load_models(
      config, checkpoint, sub_checkpoint)
  controller = build_team(config.agents, backend, main_model=main_model,
                          main_tokenizer=main_tok, sub_model=sub_model,
                          sub_tokenizer=sub_tok)
  tasks = list(taskset.tasks)
  bar = tqdm.tqdm(total=len(tasks) * k, unit="rollout", disable=not progress,
                  file=sys.stderr, desc=f"evaluate {taskset.name}")
  with open(out / "transcripts.jsonl", "w", encoding="utf-8") as f:

    def write(rollout):
      task = tasks[rollout.main.question_index]
      line = {"task_id": task.task_id, "question": task.question,
              "answers": list(task.answers), "level": task.level,
              "hops": task.hops, "rollout": rollout.main.rollout_index,
              "correct": is_correct(rollout.main.answer, task),
              "transcript": rollout.to_json()}
      f.write(json.dumps(line, ensure_ascii=False) + "\n")
      f.flush()
      bar.update(1)

    run = roll_out(controller, tasks, k, jax.random.key(config.seed),
                   weights_of(config.reward.to_dict()), on_rollout=write)
  bar.close()
  seconds = run.figures["seconds"]
  metrics = report.summarize(tasks, run.rollouts, run.scores)
  metrics["seconds"] = seconds
  metrics["generated_tokens_per_second"] = run.figures["tokens_per_second"]
  novelty = (training_novelty(training, main_tok) if training is not None
             else None)
  if novelty is not None:  # Questions whose facts the warm start never showed.
    novel = novelty.mask(tasks)
    metrics["novel_share"] = float(novel.mean())
    if novel.any():
      metrics["novel_accuracy"] = float(run.scores.main_correct[novel].mean())
  if isinstance(backend, WebBackend):  # tools/errors/<kind>, tools/searches.
    metrics.update(backend.figures())
  (out / "metrics.json").write_text(json.dumps(
      {"data": str(data), "split": config.eval.split, "rollouts": k,
       "metrics": metrics, "config": config.to_dict()}, indent=2,
      default=str) + "\n")
  logging.info("wrote %s", out)
  print(f"{taskset.name}: {len(tasks)} questions x {k} rollouts in "
        f"{seconds:.0f} s -> {out}")
  print(report.format_table(metrics))
  return metrics


def main(argv: list[str]) -> None:
  logs.configure()  # Library logs only with --verbosity=1 (runtime/logs.py).
  if len(argv) > 1:
    config_checks.usage_error(f"unexpected arguments {argv[1:]} (config "
                              "fields are set as --config.FIELD=VALUE).")
  if _CONFIG.value is None:
    config_checks.usage_error("--config is required, e.g. --config "
                              "configs/evaluate.py")
  from mgrpo_jax.models.loading import enable_compilation_cache
  enable_compilation_cache()
  try:
    evaluate(_CONFIG.value, data=_DATA.value, data_format=_FORMAT.value,
             corpus=_CORPUS.value, checkpoint=_CHECKPOINT.value,
             sub_checkpoint=_SUB_CHECKPOINT.value,
             output_dir=_OUTPUT_DIR.value)
  except ValueError as e:  # Bad config, data or files: say what, not a trace.
    config_checks.usage_error(str(e))


if __name__ == "__main__":
  app.run(main, flags_parser=config_checks.parse_flags)
