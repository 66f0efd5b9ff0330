"""Writes the synthetic world as benchmark files: `python -m mgrpo_jax.data.export`.

  python -m mgrpo_jax.data.export --out DIR [--config configs/default.py]
      [--config.world.num_entities=...]

writes, for the world of the config's `world` section:

  DIR/musique/{train,validation,test}.jsonl   MuSiQue records: the question,
      its answer, its decomposition ("#k" for step k's answer, each step's
      paragraph_support_idx) and its supporting pages as paragraphs (with
      an "id", which MuSiQue's own files lack: the world's page id)
  DIR/hotpotqa/{train,validation,test}.json   HotpotQA records (a JSON
      list): context = the supporting pages, split into sentences,
      supporting_facts = the sentence of each page that states its hop
  DIR/corpus.jsonl                            every page of the world, as
      {"id", "title", "text"} (config.data.corpus / evaluate --corpus)

Training from the MuSiQue files with DIR/corpus.jsonl as the corpus is the
same run as training on the synthetic world (tests/export_test.py): same
questions, pages, tokenizer and demonstrations. The HotpotQA files test the
HotpotQA path; their pages get HotpotQA's ids (a hash of the title), so they
pair with config.data.corpus="files".
"""

from __future__ import annotations

import json
import pathlib
import re
import sys
from typing import Any, Sequence

from mgrpo_jax.data.corpus import Document
from mgrpo_jax.data.task import Task
from mgrpo_jax.data.world import SPLITS, World, WorldConfig, generate_world

_SENTENCE = re.compile(r"[^.]+\.(?:\s|$)")


def sentences(text: str) -> list[str]:
  """A page's sentences, each with its end (joined by " ", the text)."""
  found = [s.strip() for s in _SENTENCE.findall(text)]
  if " ".join(found) != text:
    return [text]  # Not cleanly split: one sentence keeps the text exact.
  return found


def _steps_with_references(task: Task) -> list[str]:
  """The sub-questions with step k's answer written "#k" (MuSiQue's way)."""
  out = []
  for i, step in enumerate(task.sub_questions):
    question = step.question
    if i:
      question = question.replace(task.sub_questions[i - 1].answer, f"#{i}")
    out.append(question)
  return out


def supporting_pages(task: Task, pages: dict[str, Document]
                     ) -> list[Document]:
  """The page of each hop's entity (the page that states the hop)."""
  return [pages[d] for d in task.metadata["doc_ids"][:len(task.sub_questions)]]


def musique_record(task: Task, pages: dict[str, Document]) -> dict[str, Any]:
  support = supporting_pages(task, pages)
  return {
      "id": task.task_id, "question": task.question, "answer": task.answer,
      "answer_aliases": list(task.answers[1:]), "answerable": True,
      "paragraphs": [{"idx": i, "id": d.doc_id, "title": d.title,
                      "paragraph_text": d.text, "is_supporting": True}
                     for i, d in enumerate(support)],
      "question_decomposition": [
          {"id": i, "question": q, "answer": s.answer,
           "paragraph_support_idx": i}
          for i, (q, s) in enumerate(zip(_steps_with_references(task),
                                         task.sub_questions))]}


def hotpotqa_record(task: Task, pages: dict[str, Document]
                    ) -> dict[str, Any]:
  support = supporting_pages(task, pages)
  facts = []
  for doc, step in zip(support, task.sub_questions):
    found = sentences(doc.text)
    stating = [i for i, s in enumerate(found) if step.answer in s]
    facts.append([doc.title, stating[0] if stating else 0])
  return {"_id": task.task_id, "question": task.question,
          "answer": task.answer, "type": "bridge", "level": task.level,
          "supporting_facts": facts,
          "context": [[d.title, sentences(d.text)] for d in support]}


def export_world(world: World, out: str | pathlib.Path) -> list[pathlib.Path]:
  """Writes the files above; returns their paths."""
  out = pathlib.Path(out)
  pages = {d.doc_id: d for d in world.documents}
  written = []
  for split in SPLITS:
    tasks = world.splits[split]
    musique = out / "musique" / f"{split}.jsonl"
    musique.parent.mkdir(parents=True, exist_ok=True)
    musique.write_text("".join(
        json.dumps(musique_record(t, pages), ensure_ascii=False) + "\n"
        for t in tasks), encoding="utf-8")
    hotpot = out / "hotpotqa" / f"{split}.json"
    hotpot.parent.mkdir(parents=True, exist_ok=True)
    hotpot.write_text("[\n" + ",\n".join(
        json.dumps(hotpotqa_record(t, pages), ensure_ascii=False)
        for t in tasks) + "\n]\n", encoding="utf-8")
    written += [musique, hotpot]
  corpus = out / "corpus.jsonl"
  corpus.write_text("".join(
      json.dumps({"id": d.doc_id, "title": d.title, "text": d.text},
                 ensure_ascii=False) + "\n" for d in world.documents),
                    encoding="utf-8")
  return written + [corpus]


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    config_checks.usage_error(f"unexpected arguments {argv[1:]} (config "
                              "fields are set as --config.FIELD=VALUE).")
  config = _CONFIG.value
  out = pathlib.Path(_OUT.value)
  if (out / "corpus.jsonl").exists():
    config_checks.usage_error(f"--out={_OUT.value}: already holds an export "
                              "(corpus.jsonl); choose a new folder (nothing "
                              "is overwritten).")
  try:
    world_config = WorldConfig(**config.world.to_dict())
  except (TypeError, ValueError) as e:
    config_checks.usage_error(f"config.world: {e}")
  paths = export_world(generate_world(world_config), out)
  print(f"wrote {len(paths)} files under {out}: musique/, hotpotqa/ "
        "(train, validation, test) and corpus.jsonl", file=sys.stdout)


if __name__ == "__main__":
  from absl import app, flags  # pylint: disable=g-import-not-at-top,g-multiple-import
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.runtime import config_checks  # pylint: disable=g-import-not-at-top
  _CONFIG = config_flags.DEFINE_config_file(
      "config", "configs/default.py", "A config file whose `world` section "
      "describes the world to write.", lock_config=True)
  _OUT = flags.DEFINE_string("out", None, "The folder the files go to.")
  flags.mark_flag_as_required("out")
  app.run(main, flags_parser=config_checks.parse_flags)
