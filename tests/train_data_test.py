"""train/data.py: the trainer's splits from the generated world or from
files, the tools' pages, and bad data refused before anything is written."""

import json
import pathlib
import subprocess
import sys

import pytest

from trainer_test_utils import ROOT, tiny_config
from mgrpo_jax.data import export
from mgrpo_jax.data.records import DataError
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.runtime.config_checks import ConfigError
from mgrpo_jax.train import data as train_data
from mgrpo_jax.train import trainer
from mgrpo_jax.train.run_checks import check_run_config
from mgrpo_jax.train.warm_start import warm_start_key


@pytest.fixture(name="files")
def _files(tmp_path):
  config = tiny_config(tmp_path / "world")
  export.export_world(generate_world(WorldConfig(**config.world.to_dict())),
                      tmp_path / "files")
  return tmp_path / "files"


def _from_files(tmp_path, files, kind="musique", corpus=None):
  config = tiny_config(tmp_path / "run")
  suffix = ".jsonl" if kind == "musique" else ".json"
  for split in train_data.SPLITS:
    config.data[split] = str(files / kind / f"{split}{suffix}")
  config.data.corpus = corpus or "files"
  return config


def test_the_generated_world_keeps_the_keys_it_always_had(tmp_path):
  config = tiny_config(tmp_path)
  assert train_data.is_synthetic(config)
  assert train_data.identity(config) == {}
  before = warm_start_key(config)
  del config.data  # A config from before the data section existed.
  del config.sft.demonstrations
  assert warm_start_key(config) == before


def test_splits_and_pages_from_files(tmp_path, files):
  config = _from_files(tmp_path, files)
  config.data.train_questions = 3
  data = train_data.load_data(config)
  assert [t.source for t in data.train] == ["musique"] * 3
  assert len(data.validation) == config.train.eval_questions
  assert data.test == []  # train.test_questions = 0: not loaded.
  # "files": the supporting paragraphs the three splits carry, each once.
  ids = [d.doc_id for d in data.documents]
  assert len(ids) == len(set(ids)) and set(ids) <= {
      d.doc_id for d in generate_world(
          WorldConfig(**config.world.to_dict())).documents}
  assert data.backend.documents == list(data.documents)
  # The key of the warm start follows the files' contents.
  key = warm_start_key(config)
  identity = train_data.identity(config)
  assert set(identity["files"]) == set(train_data.SPLITS)
  path = pathlib.Path(config.data.train)
  path.write_text(path.read_text() + path.read_text().splitlines()[0]
                  .replace("synthetic-train-00000", "extra") + "\n")
  assert warm_start_key(config) != key


def test_a_shared_corpus_file_replaces_the_files_pages(tmp_path, files):
  config = _from_files(tmp_path, files, "hotpotqa",
                       corpus=str(files / "corpus.jsonl"))
  data = train_data.load_data(config)
  assert len(data.documents) == config.world.num_entities


def test_a_corpus_file_the_reader_refuses_names_the_field(tmp_path, files):
  pages = tmp_path / "pages.jsonl"
  pages.write_text('{"id": "p1", "title": "A", "text": "a"}\n'
                   '{"id": "p1", "title": "B", "text": "b"}\n')
  config = _from_files(tmp_path, files, corpus=str(pages))
  with pytest.raises(DataError, match=r"config.data.corpus='.*pages.jsonl': "
                     r".*pages.jsonl, line 2: field 'id' repeats 'p1'"):
    train_data.load_data(config)


def test_one_id_for_two_pages_is_refused(tmp_path, files):
  config = _from_files(tmp_path, files)
  path = pathlib.Path(config.data.validation)
  records = [json.loads(line) for line in path.read_text().splitlines()]
  train = json.loads(pathlib.Path(config.data.train).read_text()
                     .splitlines()[0])
  records[0]["paragraphs"][0]["id"] = train["paragraphs"][0]["id"]
  records[0]["paragraphs"][0]["paragraph_text"] = "Another text."
  path.write_text("".join(json.dumps(r) + "\n" for r in records))
  with pytest.raises(DataError, match="give different pages the id"):
    train_data.load_data(config)


def _no_run_dir(config, error, match):
  with pytest.raises(error, match=match):
    trainer.run(config, log=lambda m: None)
  assert not pathlib.Path(config.run_dir).exists()


def test_bad_data_is_refused_before_anything_is_written(tmp_path, files):
  config = _from_files(tmp_path, files)
  config.data.train = str(tmp_path / "nowhere.jsonl")
  _no_run_dir(config, ConfigError, r"config.data.train='.*nowhere.jsonl': "
              "expected 'synthetic' or the path of a question file")
  config = _from_files(tmp_path, files)
  config.data.corpus = str(tmp_path / "pages.jsonl")
  _no_run_dir(config, ConfigError, "config.data.corpus=.*no such file")
  config = _from_files(tmp_path, files)
  config.data.format = "squad"
  _no_run_dir(config, ConfigError, "config.data.format='squad'")
  # A file that is not what it says: the reader's message, with the field.
  broken = tmp_path / "broken.jsonl"
  broken.write_text('{"question": "Q?", "answer": "A"}\n{not json\n')
  config = _from_files(tmp_path, files)
  config.data.validation = str(broken)
  _no_run_dir(config, DataError, r"config.data.validation='.*broken.jsonl'"
              r": .*broken.jsonl, line 2")
  # An empty file (no questions after the limit, or none at all).
  empty = tmp_path / "empty.json"
  empty.write_text("[]\n")
  config = _from_files(tmp_path, files)
  config.data.train = str(empty)
  _no_run_dir(config, DataError, "config.data.train='.*empty.json'")
  # Questions without a decomposition for the oracle's demonstrations.
  plain = tmp_path / "plain.jsonl"
  plain.write_text('{"question": "Who wrote X?", "answer": "Ann"}\n')
  config = _from_files(tmp_path, files)
  config.data.train = str(plain)
  _no_run_dir(config, DataError, "task 'qa-00000' has no "
              "question_decomposition")
  # Files with no pages of their own and no corpus to search.
  config = _from_files(tmp_path, files)
  config.data.train = config.data.validation = str(plain)
  config.sft.steps = 0
  for split in ("validation",):
    config.data[split] = str(plain)
  config.data.test = str(plain)
  _no_run_dir(config, DataError, "config.data.corpus='files': the data "
              "files carry no pages to search")


def test_web_tools_in_training_need_a_key_or_replay(tmp_path, monkeypatch):
  config = tiny_config(tmp_path)
  config.tools.backend = "web"
  config.tools.web.endpoint = "http://127.0.0.1:9/search"
  monkeypatch.delenv("MGRPO_SEARCH_API_KEY", raising=False)
  config.sft.steps = 0
  with pytest.raises(ConfigError, match="config.tools.web.replay=False: "
                     "expected True .* MGRPO_SEARCH_API_KEY"):
    check_run_config(config, "all")
  monkeypatch.setenv("MGRPO_SEARCH_API_KEY", "k")
  check_run_config(config, "all")
  config.sft.steps = 2  # The oracle visits local pages by id.
  with pytest.raises(ConfigError, match="config.sft.demonstrations='oracle'"):
    check_run_config(config, "all")


def test_main_says_what_is_wrong_with_a_data_file(tmp_path):
  broken = tmp_path / "broken.jsonl"
  broken.write_text("{not json\n")
  run_dir = tmp_path / "run"
  result = subprocess.run(
      [sys.executable, "-m", "mgrpo_jax.main", "--config=configs/default.py",
       f"--config.data.train={broken}", f"--config.run_dir={run_dir}"],
      cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
  assert result.returncode == 2, result.stderr
  assert "config.data.train=" in result.stderr and "line 1" in \
      result.stderr
  assert "Traceback" not in result.stderr
  assert not run_dir.exists()
