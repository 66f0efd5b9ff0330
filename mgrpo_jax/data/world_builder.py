"""The synthetic world as tensorflow-datasets array_record files, read back by
random access (`tfds.data_source`, no TensorFlow).

Two builders share one config per `WorldConfig`: `synthetic_world` holds the
questions (splits train / validation / test) and `synthetic_world_corpus` the
pages (split "corpus"). Both are generated from `generate_world(config)` the
first time they are asked for and read from disk afterwards, so a stored
world's questions and pages always come from the same generator run; the
builders' version is `WORLD_VERSION`, so a changed generator writes afresh.

Files live under `<data_dir>/<builder>/<config name>/<version>/`, where
data_dir is the argument, else `$MGRPO_JAX_CACHE/tfds`, else
`~/.cache/mgrpo_jax/tfds`. Building says so in one line ("world: built 40
entities, ..."; runtime/logs.py); tfds' own output while building (its
"Downloading and preparing dataset" print, for a world nothing downloads,
and its progress bars) is kept back, shown only with --verbosity=1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import io
import os
import pathlib
import time
from typing import Any, Iterator, Mapping

import numpy as np
import tensorflow_datasets as tfds
from tensorflow_datasets.core.utils import tqdm_utils

from mgrpo_jax.data.corpus import Document
from mgrpo_jax.data.task import SubQuestion, Task, TaskSet
from mgrpo_jax.runtime import logs
from mgrpo_jax.runtime.cache import cache_root
from mgrpo_jax.data.world import (SOURCE, SPLITS, WORLD_VERSION, WorldConfig,
                                  check_split, generate_world)

CORPUS_SPLIT = "corpus"
BUILDERS = ("synthetic_world", "synthetic_world_corpus")  # tfds names.


def default_data_dir(data_dir: str | os.PathLike | None = None
                     ) -> pathlib.Path:
  """`data_dir`, else $MGRPO_JAX_CACHE/tfds, else ~/.cache/mgrpo_jax/tfds."""
  if data_dir:
    return pathlib.Path(data_dir).expanduser()
  return cache_root() / "tfds"


def config_name(config: WorldConfig) -> str:
  """The builder-config name: every WorldConfig field, so worlds never share
  files ("e1000-q2000-200-500-h4-s0")."""
  return (f"e{config.num_entities}-q{config.train_questions}-"
          f"{config.validation_questions}-{config.test_questions}-"
          f"h{config.max_hops}-s{config.seed}")


@dataclasses.dataclass
class WorldBuilderConfig(tfds.core.BuilderConfig):
  """A builder config carrying the world it stores."""
  world: WorldConfig = WorldConfig()


@functools.cache
def builder_config(config: WorldConfig) -> WorldBuilderConfig:
  """The builder config of a world; one object per WorldConfig, as tfds
  rejects a config object that is not the listed one under a listed name."""
  return WorldBuilderConfig(name=config_name(config), world=config,
                            description=f"Synthetic world {config}.")


@functools.lru_cache(maxsize=2)
def _world(config: WorldConfig):
  """Both builders of one config generate the world once."""
  return generate_world(config)


class SyntheticWorld(tfds.core.GeneratorBasedBuilder):
  """Questions of the synthetic multi-hop world (data/world.py)."""

  VERSION = tfds.core.Version(WORLD_VERSION)
  BUILDER_CONFIGS = [builder_config(WorldConfig())]

  def _info(self) -> tfds.core.DatasetInfo:
    return self.dataset_info_from_configs(
        description="Synthetic multi-hop questions over invented entities.",
        disable_shuffling=True,  # Stored, and read, in generation order.
        features=tfds.features.FeaturesDict({
            "task_id": tfds.features.Text(),
            "question": tfds.features.Text(),
            "answers": tfds.features.Sequence(tfds.features.Text()),
            "level": tfds.features.Text(),
            "hops": tfds.features.Scalar(np.int32),
            "sub_questions": tfds.features.Sequence({
                "question": tfds.features.Text(),
                "answer": tfds.features.Text(),
            }),
            "relations": tfds.features.Sequence(tfds.features.Text()),
            "doc_ids": tfds.features.Sequence(tfds.features.Text()),
        }))

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing is downloaded.
    return {split: self._generate_examples(split) for split in SPLITS}

  def _generate_examples(self, split: str) -> Iterator[tuple[str, dict]]:
    for task in _world(self.builder_config.world).splits[split]:
      yield task.task_id, {
          "task_id": task.task_id,
          "question": task.question,
          "answers": list(task.answers),
          "level": task.level,
          "hops": task.hops,
          "sub_questions": {
              "question": [s.question for s in task.sub_questions],
              "answer": [s.answer for s in task.sub_questions],
          },
          "relations": list(task.metadata["relations"]),
          "doc_ids": list(task.metadata["doc_ids"]),
      }


class SyntheticWorldCorpus(tfds.core.GeneratorBasedBuilder):
  """Pages of the synthetic multi-hop world (data/world.py)."""

  VERSION = tfds.core.Version(WORLD_VERSION)
  BUILDER_CONFIGS = [builder_config(WorldConfig())]

  def _info(self) -> tfds.core.DatasetInfo:
    return self.dataset_info_from_configs(
        description="Pages of the synthetic multi-hop world, one per entity.",
        disable_shuffling=True,  # Stored, and read, in doc-id order.
        features=tfds.features.FeaturesDict({
            "doc_id": tfds.features.Text(),
            "title": tfds.features.Text(),
            "text": tfds.features.Text(),
        }))

  def _split_generators(self, dl_manager):
    del dl_manager  # Nothing is downloaded.
    return {CORPUS_SPLIT: self._generate_examples()}

  def _generate_examples(self) -> Iterator[tuple[str, dict]]:
    for doc in _world(self.builder_config.world).documents:
      yield doc.doc_id, dataclasses.asdict(doc)


@contextlib.contextmanager
def _tfds_output_kept_back():
  """Runs tfds with its stdout prints caught and its progress bars off;
  what it printed goes to `logs.detail`."""
  # tfds has a switch for its bars but no getter: its flag is read to put
  # back what it was.
  bars = getattr(tqdm_utils, "_active", True)
  tfds.display_progress_bar(False)
  printed = io.StringIO()
  try:
    with contextlib.redirect_stdout(printed):
      yield
  finally:
    tfds.display_progress_bar(bars)
    for line in printed.getvalue().splitlines():
      if line.strip():
        logs.detail(f"tfds: {line.strip()}")


def prepare_world(config: WorldConfig,
                  data_dir: str | os.PathLike | None = None) -> pathlib.Path:
  """Writes the world's files (both builders) unless they are there, saying
  in one line what it built; returns the data directory.

  Processes sharing the cache (a run's --role=main and --role=sub on one
  host) take turns under a file lock: the first prepares the files, the
  others find them prepared (two preparations at once collide on tfds's
  final rename).
  """
  directory = default_data_dir(data_dir)
  directory.mkdir(parents=True, exist_ok=True)
  with open(directory / ".synthetic_world.lock", "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # Released when the file closes.
    missing = [builder for builder in (
        tfds.builder(name, data_dir=os.fspath(directory),
                     config=builder_config(config),
                     file_format="array_record") for name in BUILDERS)
               if not builder.is_prepared()]
    if not missing:
      return directory
    start = time.perf_counter()
    with _tfds_output_kept_back():
      for builder in missing:
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(
                try_download_gcs=False))
    world = _world(config)
    sizes = "/".join(str(len(world.splits[split])) for split in SPLITS)
    logs.say(f"world: built {len(world.documents)} entities, {sizes} "
             f"{'/'.join(SPLITS)} questions in "
             f"{time.perf_counter() - start:.1f} s -> {directory} "
             f"({config_name(config)})")
  return directory


def _source(builder_name: str, split: str, config: WorldConfig,
            data_dir: str | os.PathLike | None):
  """The split as a random-access data source, prepared on first use."""
  directory = prepare_world(config, data_dir)
  return tfds.data_source(
      builder_name, split=split, data_dir=os.fspath(directory),
      download=False, builder_kwargs={"config": builder_config(config),
                                      "file_format": "array_record"})


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _texts(values: Any) -> tuple[str, ...]:
  return tuple(_text(v) for v in values)


def _task(example: Mapping[str, Any]) -> Task:
  sub = example["sub_questions"]
  sub_questions = tuple(SubQuestion(_text(q), _text(a))
                        for q, a in zip(sub["question"], sub["answer"]))
  return Task(_text(example["task_id"]), _text(example["question"]),
              _texts(example["answers"]), SOURCE, level=_text(example["level"]),
              hops=int(example["hops"]), sub_questions=sub_questions,
              metadata={"relations": _texts(example["relations"]),
                        "doc_ids": _texts(example["doc_ids"])})


def load_world_documents(config: WorldConfig = WorldConfig(), *,
                         data_dir: str | os.PathLike | None = None
                         ) -> tuple[Document, ...]:
  """The world's pages, in doc-id order, from the tfds cache (written on
  first use)."""
  source = _source("synthetic_world_corpus", CORPUS_SPLIT, config, data_dir)
  docs = (source[i] for i in range(len(source)))
  return tuple(Document(_text(d["doc_id"]), _text(d["title"]), _text(d["text"]))
               for d in docs)


def load_world(split: str = "test", *, config: WorldConfig = WorldConfig(),
               data_dir: str | os.PathLike | None = None) -> TaskSet:
  """The split's questions (in generation order) and the world's pages, read
  from the tfds cache (written on first use)."""
  check_split(split)
  source = _source("synthetic_world", split, config, data_dir)
  tasks = [_task(source[i]) for i in range(len(source))]
  return TaskSet(f"{SOURCE}:{split}", tasks,
                 load_world_documents(config, data_dir=data_dir))
