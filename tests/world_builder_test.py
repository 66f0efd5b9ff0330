"""The world's tfds builders: prepared once as array_record, read back by
random access equal to the generator's output, cached per config."""

import dataclasses
import pathlib

import pytest

from mgrpo_jax.data import world_builder
from mgrpo_jax.data.world import SPLITS, WorldConfig, generate_world
from mgrpo_jax.data.world_builder import (config_name, default_data_dir,
                                          load_world, load_world_documents)

SMALL = WorldConfig(num_entities=40, train_questions=16,
                    validation_questions=6, test_questions=8, seed=7)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("tfds")


@pytest.fixture(scope="module")
def loaded(data_dir):
  return {split: load_world(split, config=SMALL, data_dir=data_dir)
          for split in SPLITS}


def test_round_trip_equals_the_generator(loaded):
  world = generate_world(SMALL)
  for split in SPLITS:
    assert loaded[split] == world.task_set(split)
    assert loaded[split].tasks[0].metadata == world.splits[split][0].metadata


def test_files_are_array_record(loaded, data_dir):
  del loaded
  questions = data_dir / "synthetic_world" / config_name(SMALL)
  corpus = data_dir / "synthetic_world_corpus" / config_name(SMALL)
  for split in SPLITS:
    assert list(questions.glob(f"*/synthetic_world-{split}.array_record-*"))
  assert list(corpus.glob("*/synthetic_world_corpus-corpus.array_record-*"))


def test_splits_are_disjoint(loaded):
  questions = [{t.question for t in loaded[s].tasks} for s in SPLITS]
  assert sum(map(len, questions)) == len(set().union(*questions))


def test_prepared_worlds_are_read_not_regenerated(loaded, data_dir,
                                                  monkeypatch):
  def fail(config):
    raise AssertionError(f"regenerated {config}")

  monkeypatch.setattr(world_builder, "_world", fail)
  assert load_world("test", config=SMALL, data_dir=data_dir) == loaded["test"]


def test_same_seed_same_world_other_seed_other_world(loaded, data_dir):
  other = dataclasses.replace(SMALL, seed=8)
  assert config_name(other) != config_name(SMALL)
  docs = load_world_documents(other, data_dir=data_dir)
  assert docs == generate_world(other).documents
  assert docs != loaded["test"].documents


def test_bad_split_is_an_error(data_dir):
  with pytest.raises(ValueError, match="split='dev': expected one of"):
    load_world("dev", config=SMALL, data_dir=data_dir)


def test_default_data_dir(monkeypatch, tmp_path):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path))
  assert default_data_dir() == tmp_path / "tfds"
  assert default_data_dir(tmp_path / "x") == tmp_path / "x"
  monkeypatch.delenv("MGRPO_JAX_CACHE")
  assert default_data_dir() == (pathlib.Path("~/.cache/mgrpo_jax/tfds")
                                .expanduser())


def test_the_default_world(data_dir):
  # The default config is the builders' listed one (tfds wants that object).
  assert (load_world("validation", data_dir=data_dir)
          == generate_world().task_set("validation"))


CONCURRENT = """
import sys
from mgrpo_jax.data.world import WorldConfig
from mgrpo_jax.data.world_builder import load_world
world = WorldConfig(num_entities=40, train_questions=16,
                    validation_questions=6, test_questions=8, seed=11)
tasks = load_world("train", config=world, data_dir=sys.argv[1])
print(len(tasks.tasks), len(tasks.documents))
"""


def test_two_processes_prepare_the_same_world_at_once(tmp_path):
  """--role=main and --role=sub on one host load the world together."""
  import subprocess
  import sys
  procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT,
                             str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
           for _ in range(2)]
  outs = [p.communicate(timeout=300)[0] for p in procs]
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-2000:]
  assert outs[0].splitlines()[-1] == outs[1].splitlines()[-1] == "16 40"


def test_building_says_one_line_and_reading_says_nothing(tmp_path, caplog,
                                                         capsys):
  world = dataclasses.replace(SMALL, seed=9)
  caplog.set_level("DEBUG", logger="mgrpo_jax")
  load_world("train", config=world, data_dir=tmp_path)
  said = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
  assert len(said) == 1, said
  assert said[0].startswith(
      "world: built 40 entities, 16/6/8 train/validation/test questions in ")
  assert said[0].endswith(f" -> {tmp_path} ({config_name(world)})")
  # tfds' print for a download that never happens is kept back (DEBUG).
  assert "Downloading and preparing" not in capsys.readouterr().out
  assert any("Downloading and preparing" in r.getMessage()
             for r in caplog.records if r.levelname == "DEBUG")
  caplog.clear()
  load_world("test", config=world, data_dir=tmp_path)
  load_world_documents(world, data_dir=tmp_path)
  assert not [r for r in caplog.records if r.name.startswith("mgrpo_jax")]
