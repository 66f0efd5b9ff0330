"""Hugging Face checkpoint directories <-> our stacked decoder parameters.

A directory holds `config.json` and either one `model.safetensors` or shards
listed in `model.safetensors.index.json` ("weight_map": tensor -> file).
Tensors are read with `safetensors` in its numpy framework (no torch);
bfloat16 tensors come back as `ml_dtypes.bfloat16` arrays (jax ships
ml_dtypes; importing it teaches numpy the "bfloat16" dtype name).

Name map (N = layer; our layer parameters are stacked along a leading L axis;
"T" = transposed, since HF's nn.Linear stores [out, in] and we store [in, out]):

  model.embed_tokens.weight                    embed          [V, D]
  model.layers.N.input_layernorm.weight        attn_norm[N]   [D]
  model.layers.N.self_attn.q_proj.weight       wq[N]    T     [D, H*Dh]
  model.layers.N.self_attn.k_proj.weight       wk[N]    T     [D, G*Dh]
  model.layers.N.self_attn.v_proj.weight       wv[N]    T     [D, G*Dh]
  model.layers.N.self_attn.o_proj.weight       wo[N]    T     [H*Dh, D]
  model.layers.N.self_attn.{q,k,v}_proj.bias   b{q,k,v}[N]    (attention_bias)
  model.layers.N.self_attn.{q,k}_norm.weight   {q,k}_norm[N]  [Dh] (qk_norm)
  model.layers.N.post_attention_layernorm.weight  mlp_norm[N] [D]
  model.layers.N.mlp.{gate,up}_proj.weight     w_{gate,up}[N] T [D, F]
  model.layers.N.mlp.down_proj.weight          w_down[N] T    [F, D]
  model.norm.weight                            final_norm     [D]
  lm_head.weight                               lm_head  T     [D, V] (untied)

Qwen3-MoE's MLP (X = expert; in place of mlp.{gate,up,down}_proj):

  model.layers.N.mlp.gate.weight               router[N]  T   [D, E]
  model.layers.N.mlp.experts.X.{gate,up}_proj.weight
                                   expert_{gate,up}[N, X] T   [D, Fe]
  model.layers.N.mlp.experts.X.down_proj.weight  expert_down[N, X] T [Fe, D]

With tied embeddings an `lm_head.weight` in the file is accepted only when it
equals the embedding. Shape letters: see models/config.py.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (registers numpy's "bfloat16" dtype name)
import numpy as np
import safetensors
import safetensors.numpy

from mgrpo_jax.models.build import expected_shapes
from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.models.decoder import Decoder
from mgrpo_jax.models.tensor_views import ParameterView, Piece
from mgrpo_jax.models.tokenizer import Tokenizer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
GENERATION_CONFIG_FILE = "generation_config.json"

# Per-layer tensors: HF name after "model.layers.N.", our name, transposed.
_LAYER_TENSORS = (
    ("input_layernorm.weight", "attn_norm", False),
    ("self_attn.q_proj.weight", "wq", True),
    ("self_attn.k_proj.weight", "wk", True),
    ("self_attn.v_proj.weight", "wv", True),
    ("self_attn.o_proj.weight", "wo", True),
    ("self_attn.q_proj.bias", "bq", False),
    ("self_attn.k_proj.bias", "bk", False),
    ("self_attn.v_proj.bias", "bv", False),
    ("self_attn.q_norm.weight", "q_norm", False),
    ("self_attn.k_norm.weight", "k_norm", False),
    ("post_attention_layernorm.weight", "mlp_norm", False),
    ("mlp.gate_proj.weight", "w_gate", True),
    ("mlp.up_proj.weight", "w_up", True),
    ("mlp.down_proj.weight", "w_down", True),
    ("mlp.gate.weight", "router", True),
)
# Per-expert tensors: HF name after "model.layers.N.mlp.experts.X.".
_EXPERT_TENSORS = (
    ("gate_proj.weight", "expert_gate", True),
    ("up_proj.weight", "expert_up", True),
    ("down_proj.weight", "expert_down", True),
)
# Whole-model tensors: HF name, our name, transposed.
_GLOBAL_TENSORS = (
    ("model.embed_tokens.weight", "embed", False),
    ("model.norm.weight", "final_norm", False),
    ("lm_head.weight", "lm_head", True),
)
_TIED_HEAD = "lm_head.weight"


class CheckpointError(ValueError):
  """A checkpoint file is missing, incomplete or disagrees with its config."""


def hf_tensor_names(config: ModelConfig) -> dict[str, tuple[str,
                                                            tuple[int, ...],
                                                            bool]]:
  """HF tensor name -> (our name, its index in ours: () whole, (layer,), or
  (layer, expert), transposed)."""
  ours = expected_shapes(config)
  out: dict[str, tuple[str, tuple[int, ...], bool]] = {}
  for hf, name, transpose in _GLOBAL_TENSORS:
    if name in ours:
      out[hf] = (name, (), transpose)
  for layer in range(config.num_layers):
    for suffix, name, transpose in _LAYER_TENSORS:
      if name in ours:
        out[f"model.layers.{layer}.{suffix}"] = (name, (layer,), transpose)
    for expert in range(config.num_experts):
      for suffix, name, transpose in _EXPERT_TENSORS:
        out[f"model.layers.{layer}.mlp.experts.{expert}.{suffix}"] = (
            name, (layer, expert), transpose)
  return out


class ArrayAssembler:
  """Fills our stacked parameter arrays one (HF-layout) tensor at a time.

  `put` checks each tensor's shape against the config before storing it, so a
  mismatch names the file, the tensor and both shapes; `arrays` checks that
  every parameter was filled.
  """

  def __init__(self, config: ModelConfig, source: str):
    self.config = config
    self.source = source
    self.shapes = expected_shapes(config)
    self._arrays: dict[str, np.ndarray] = {}
    self._filled: dict[str, set[int | None]] = {}

  def put(self, name: str, layer: int | None, value: np.ndarray, *,
          transpose: bool, file: str, tensor: str) -> None:
    """Stores `value` (HF layout: [out, in] when `transpose`) as name[layer]."""
    shape = self.shapes[name] if layer is None else self.shapes[name][1:]
    want = tuple(reversed(shape)) if transpose else tuple(shape)
    if tuple(value.shape) != want:
      raise CheckpointError(
          f"{file}: tensor {tensor!r} has shape {tuple(value.shape)}; "
          f"config expects {want} ({_config_summary(self.config)}).")
    if transpose:
      value = value.T
    if layer is None:
      self._arrays[name] = np.ascontiguousarray(value)
    else:
      if name not in self._arrays:
        self._arrays[name] = np.empty(self.shapes[name], value.dtype)
      self._arrays[name][layer] = value
    self._filled.setdefault(name, set()).add(layer)

  def arrays(self) -> dict[str, np.ndarray]:
    """Our name -> array, after checking every parameter (and layer) is set."""
    for name, shape in self.shapes.items():
      want = ({None} if name in ("embed", "final_norm", "lm_head")
              else set(range(shape[0])))
      missing = want - self._filled.get(name, set())
      if missing:
        layers = sorted(l for l in missing if l is not None)
        raise CheckpointError(
            f"{self.source}: no tensor for parameter {name!r}"
            f"{f' of layers {layers}' if layers else ''} (expected shape "
            f"{shape} in our layout).")
    return self._arrays


def _config_summary(c: ModelConfig) -> str:
  return (f"family={c.family}, vocab_size={c.vocab_size}, hidden_size="
          f"{c.hidden_size}, intermediate_size={c.intermediate_size}, "
          f"num_heads={c.num_heads}, num_kv_heads={c.num_kv_heads}, "
          f"head_dim={c.head_dim}")


def read_config(directory: str | pathlib.Path) -> ModelConfig:
  """The ModelConfig of a checkpoint directory's config.json."""
  path = pathlib.Path(directory) / CONFIG_FILE
  if not path.is_file():
    raise CheckpointError(f"{path}: not found; a Hugging Face checkpoint "
                          f"directory must contain {CONFIG_FILE}.")
  try:
    hf = json.loads(path.read_text(encoding="utf-8"))
  except json.JSONDecodeError as e:
    raise CheckpointError(f"{path}: not valid JSON ({e}).") from e
  return ModelConfig.from_hf(hf, source=str(path))


def _weight_files(directory: pathlib.Path) -> dict[str, pathlib.Path]:
  """Tensor name -> safetensors file, from the index or the single file."""
  index = directory / INDEX_FILE
  single = directory / WEIGHTS_FILE
  if index.is_file():
    weight_map = json.loads(index.read_text(encoding="utf-8")).get(
        "weight_map")
    if not isinstance(weight_map, dict):
      raise CheckpointError(f"{index}: no 'weight_map' object (expected "
                            "tensor name -> shard file).")
    missing = sorted({f for f in weight_map.values()
                      if not (directory / f).is_file()})
    if missing:
      raise CheckpointError(
          f"{index}: names {len(missing)} shard file(s) not present in "
          f"{directory}: {missing}.")
    return {name: directory / f for name, f in weight_map.items()}
  if single.is_file():
    with safetensors.safe_open(str(single), framework="np") as f:
      return {name: single for name in f.keys()}
  raise CheckpointError(f"{directory}: no {WEIGHTS_FILE} nor {INDEX_FILE} "
                        "(only safetensors checkpoints are read).")


def read_weights(directory: str | pathlib.Path, config: ModelConfig, *,
                 lazy: bool = False
                 ) -> dict[str, np.ndarray | ParameterView]:
  """Our parameter name -> host array (the file's dtype) of a checkpoint.

  Every tensor's presence and shape is checked from the files' headers
  first. With `lazy`, each value is a `ParameterView` that reads only the
  regions it is indexed with (a process's shards on a mesh over several
  hosts: models/tensor_views.py); else each is read whole.
  """
  directory = pathlib.Path(directory)
  files = _weight_files(directory)
  names = hf_tensor_names(config)
  missing = [n for n in names if n not in files]
  if missing:
    where = directory / (INDEX_FILE if (directory / INDEX_FILE).is_file()
                         else WEIGHTS_FILE)
    raise CheckpointError(
        f"{where}: missing tensor(s) {missing[:5]}"
        f"{' and %d more' % (len(missing) - 5) if len(missing) > 5 else ''} "
        f"required by the config ({_config_summary(config)}).")
  tied_head = (config.tie_word_embeddings and _TIED_HEAD in files)
  unexpected = sorted(n for n in files if n not in names
                      and not n.endswith("rotary_emb.inv_freq")
                      and not (tied_head and n == _TIED_HEAD))
  if unexpected:
    raise CheckpointError(
        f"{directory}: tensor(s) the config has no place for: "
        f"{unexpected[:5]} ({_config_summary(config)}, attention_bias="
        f"{config.attention_bias}, qk_norm={config.qk_norm}, "
        f"tie_word_embeddings={config.tie_word_embeddings}).")

  shapes = expected_shapes(config)
  pieces: dict[str, dict[tuple[int, ...], Piece]] = {}
  by_file: dict[pathlib.Path, list[str]] = {}
  for name in names:
    by_file.setdefault(files[name], []).append(name)
  for path, tensors in sorted(by_file.items()):
    with safetensors.safe_open(str(path), framework="np") as f:
      for tensor in tensors:
        ours, at, transpose = names[tensor]
        shape = shapes[ours][len(at):]
        want = tuple(reversed(shape)) if transpose else tuple(shape)
        got = tuple(f.get_slice(tensor).get_shape())
        if got != want:
          raise CheckpointError(
              f"{path}: tensor {tensor!r} has shape {got}; config expects "
              f"{want} ({_config_summary(config)}).")
        pieces.setdefault(ours, {})[at] = Piece(path, tensor, transpose)
  views = {}
  for name, shape in shapes.items():
    depth = len(next(iter(pieces[name])))  # Axes the pieces stack along.
    views[name] = ParameterView(shape, [pieces[name][at] for at in sorted(
        pieces[name])], stacked=depth)
  if tied_head:
    _check_tied_head(files[_TIED_HEAD], views["embed"])
  if lazy:
    return views
  return {name: np.asarray(view) for name, view in views.items()}


def _check_tied_head(file: pathlib.Path, embed: ParameterView,
                     rows: int = 4096) -> None:
  """With tied embeddings a file's lm_head must equal the embedding;
  compared `rows` rows at a time (no whole copy of either)."""
  head = ParameterView(embed.shape, [Piece(file, _TIED_HEAD, False)],
                       stacked=False)
  with safetensors.safe_open(str(file), framework="np") as f:
    shape = tuple(f.get_slice(_TIED_HEAD).get_shape())
  if shape == embed.shape and all(
      np.array_equal(head[r:r + rows], embed[r:r + rows])
      for r in range(0, shape[0], rows)):
    return
  raise CheckpointError(
      f"{file}: tensor {_TIED_HEAD!r} (shape {shape}) differs from "
      f"model.embed_tokens.weight (shape {embed.shape}) but config.json "
      "says tie_word_embeddings=true.")


def read_hf_checkpoint(directory: str | pathlib.Path, *, lazy: bool = False
                       ) -> tuple[ModelConfig,
                                  dict[str, np.ndarray | ParameterView]]:
  """(config, our name -> host array, or view with `lazy`: read_weights)
  of a Hugging Face checkpoint directory."""
  config = read_config(directory)
  return config, read_weights(directory, config, lazy=lazy)


# --- writing ----------------------------------------------------------------


def to_hf_arrays(config: ModelConfig, arrays: Mapping[str, np.ndarray]
                 ) -> dict[str, np.ndarray]:
  """HF tensor name -> contiguous array in HF layout, from our arrays."""
  out = {}
  for hf, (name, at, transpose) in hf_tensor_names(config).items():
    value = arrays[name][at]
    out[hf] = np.ascontiguousarray(value.T if transpose else value)
  return out


def model_arrays(model: Decoder) -> dict[str, np.ndarray]:
  """Our parameter name -> host numpy array (fully addressable params only)."""
  return {name: np.asarray(jax.device_get(getattr(model, name)[...]))
          for name in expected_shapes(model.config)}


_TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def hf_config(config: ModelConfig, tokenizer: Tokenizer | None
              ) -> dict[str, Any]:
  """config.json's contents: the model config and the tokenizer's ids."""
  hf = config.to_hf()
  if tokenizer is not None:
    for field, value in zip(_TOKEN_ID_FIELDS, (
        tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id)):
      if value is not None:
        hf[field] = value
  return hf


def write_hf_checkpoint(directory: str | pathlib.Path, config: ModelConfig,
                        arrays: Mapping[str, np.ndarray],
                        tokenizer: Tokenizer | None, *, dtype=None) -> None:
  """Writes config.json, model.safetensors, generation_config.json, tokenizer.

  `dtype` (default: the arrays' dtype) is what the safetensors file stores;
  float32 and bfloat16 both load in transformers and in `read_hf_checkpoint`.
  """
  directory = pathlib.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  dtype = np.dtype(dtype if dtype is not None else arrays["embed"].dtype)
  if dtype not in (np.dtype(np.float32), np.dtype(jnp.bfloat16),
                   np.dtype(np.float16)):
    raise CheckpointError(f"{directory}: dtype {dtype} cannot be saved; "
                          "expected float32, bfloat16 or float16.")
  tensors = {k: v.astype(dtype, copy=False)
             for k, v in to_hf_arrays(config, arrays).items()}
  safetensors.numpy.save_file(tensors, str(directory / WEIGHTS_FILE),
                              metadata={"format": "pt"})
  hf = hf_config(config, tokenizer)
  hf["dtype"] = dtype.name
  generation: dict[str, Any] = {}
  if tokenizer is not None:
    generation.update({k: hf[k] for k in _TOKEN_ID_FIELDS if k in hf})
    stops = list(tokenizer.stop_token_ids)
    if len(stops) > 1:
      generation["eos_token_id"] = stops
    tokenizer.save(directory)
  (directory / CONFIG_FILE).write_text(json.dumps(hf, indent=2) + "\n",
                                       encoding="utf-8")
  (directory / GENERATION_CONFIG_FILE).write_text(
      json.dumps(generation, indent=2) + "\n", encoding="utf-8")


def save_hf_checkpoint(model: Decoder, tokenizer: Tokenizer | None,
                       directory: str | pathlib.Path, *, dtype=None) -> None:
  """Saves `model` (+ tokenizer) as a Hugging Face checkpoint directory.

  The result loads with `transformers.AutoModelForCausalLM.from_pretrained`
  and with `mgrpo_jax.models.load_model`. `dtype` defaults to the model's
  parameter dtype.
  """
  write_hf_checkpoint(directory, model.config, model_arrays(model), tokenizer,
                      dtype=dtype)
