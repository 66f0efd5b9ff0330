"""data/export.py: the synthetic world written as MuSiQue and HotpotQA files,
and training from those files equal to training on the world."""

import json
import pathlib
import subprocess
import sys

from trainer_test_utils import ROOT, by_step, tiny_config

from mgrpo_jax.data import export
from mgrpo_jax.data.loading import load_corpus, load_tasks
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.runtime.metrics import MetricsWriter
from mgrpo_jax.train import trainer

WORLD = WorldConfig(num_entities=40, train_questions=8,
                    validation_questions=2, test_questions=2, max_hops=2)


def _plain(task):
  return (task.task_id, task.question, task.answers, task.level, task.hops,
          [(s.question, s.answer) for s in task.sub_questions])


def test_the_files_read_back_as_the_world(tmp_path):
  world = generate_world(WORLD)
  export.export_world(world, tmp_path)
  assert load_corpus(tmp_path / "corpus.jsonl") == world.documents
  for split in ("train", "validation", "test"):
    musique = load_tasks(tmp_path / "musique" / f"{split}.jsonl")
    assert [_plain(t) for t in musique.tasks] == [
        _plain(t) for t in world.splits[split]]
    # Each step names the page that states it: the world's page of its hop.
    for task, gold in zip(musique.tasks, world.splits[split]):
      assert [s.doc_id for s in task.sub_questions] == list(
          gold.metadata["doc_ids"][:gold.hops])
    hotpot = load_tasks(tmp_path / "hotpotqa" / f"{split}.json")
    assert [(t.task_id, t.question, t.answers) for t in hotpot.tasks] == [
        (t.task_id, t.question, t.answers) for t in world.splits[split]]
    pages = {d.doc_id: d for d in hotpot.documents}
    for task, gold in zip(hotpot.tasks, world.splits[split]):
      # Each supporting fact is the sentence that states its hop's answer.
      for (title, i), step in zip(task.metadata["supporting_facts"],
                                  gold.sub_questions):
        page = next(d for d in pages.values() if d.title == title)
        assert step.answer in export.sentences(page.text)[i]
  # Two-hop MuSiQue steps refer to the first step's answer as "#1".
  record = next(json.loads(line) for line in (
      tmp_path / "musique" / "train.jsonl").read_text().splitlines()
                if len(json.loads(line)["question_decomposition"]) == 2)
  assert "#1" in record["question_decomposition"][1]["question"]


def test_the_command_refuses_to_overwrite(tmp_path):
  out = tmp_path / "export"
  command = [sys.executable, "-m", "mgrpo_jax.data.export",
             f"--out={out}", "--config.world.num_entities=40",
             "--config.world.train_questions=8",
             "--config.world.validation_questions=2",
             "--config.world.test_questions=2"]
  first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                         check=False)
  assert first.returncode == 0, first.stderr
  assert "wrote 7 files" in first.stdout
  before = (out / "corpus.jsonl").read_bytes()
  second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          check=False)
  assert second.returncode == 2
  assert "already holds an export" in second.stderr
  assert "Traceback" not in second.stderr
  assert (out / "corpus.jsonl").read_bytes() == before


def test_training_from_the_exported_files_equals_training_on_the_world(
    tmp_path, monkeypatch):
  """Same questions, pages, tokenizer and demonstrations: the same run (the
  tokenizer and the warm start are keyed differently, by the files, and
  each is trained afresh from the same texts and demonstrations)."""
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  world_run = tiny_config(tmp_path / "world", steps=1)
  world_run.train.test_questions = 2
  export.export_world(generate_world(
      WorldConfig(**world_run.world.to_dict())), tmp_path / "files")
  file_run = tiny_config(tmp_path / "files_run", steps=1)
  file_run.train.test_questions = 2
  for split in ("train", "validation", "test"):
    file_run.data[split] = str(tmp_path / "files" / "musique"
                               / f"{split}.jsonl")
  file_run.data.corpus = str(tmp_path / "files" / "corpus.jsonl")
  logs = {}
  for name, config in (("world", world_run), ("files", file_run)):
    logs[name] = []
    trainer.run(config, log=logs[name].append)
  assert any("SFT of" in line for line in logs["files"])  # Not reused.
  world = by_step(MetricsWriter.read(pathlib.Path(world_run.run_dir) / "all"))
  files = by_step(MetricsWriter.read(pathlib.Path(file_run.run_dir) / "all"))
  assert world.keys() == files.keys() == {0, 1}
  for step in world:
    assert world[step] == files[step], step
  assert "eval/accuracy" in world[1] and "main/loss" in world[1]
