"""Reading llama-architecture GGUF files (llama.cpp's format) with `gguf`.

Every tensor is dequantised to float32 with `gguf.quants.dequantize`; its
numpy shape is then Hugging Face's [out, in]. llama.cpp's converter permutes
the rows of q_proj / k_proj (and their biases) from HF's half-split RoPE layout
to interleaved pairs; `unpermute_rows` undoes it, so the arrays match the HF
checkpoint the GGUF was made from.

Name map (N = layer): token_embd -> embed, blk.N.attn_norm -> attn_norm,
blk.N.attn_{q,k,v,output} -> w{q,k,v,o} (transposed), blk.N.attn_{q,k,v}.bias
-> b{q,k,v}, blk.N.ffn_norm -> mlp_norm, blk.N.ffn_{gate,up,down} ->
w_{gate,up,down} (transposed), output_norm -> final_norm, output -> lm_head
(absent = tied embeddings).

Tokenizer: only `tokenizer.ggml.model = gpt2` (byte-level BPE). The
pre-tokenizer is plain `ByteLevel(add_prefix_space=False, use_regex=True)`,
exactly what transformers builds from a GGUF, so ids match
`AutoTokenizer.from_pretrained(..., gguf_file=...)`. llama.cpp's "smollm"
pre-tokenizer also splits each digit first; the two differ only on runs of
spaces right before a digit (e.g. "x =  2"); we keep transformers' behaviour.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import numpy as np
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, processors

from mgrpo_jax.models.config import ModelConfig, ModelConfigError
from mgrpo_jax.models.hf_checkpoint import ArrayAssembler, CheckpointError
from mgrpo_jax.models.tokenizer import Tokenizer

ARCHITECTURE = "llama"
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types

# GGUF per-layer tensor (after "blk.N.") -> (our name, transposed).
_LAYER_TENSORS = {
    "attn_norm.weight": ("attn_norm", False),
    "attn_q.weight": ("wq", True),
    "attn_k.weight": ("wk", True),
    "attn_v.weight": ("wv", True),
    "attn_output.weight": ("wo", True),
    "attn_q.bias": ("bq", False),
    "attn_k.bias": ("bk", False),
    "attn_v.bias": ("bv", False),
    "ffn_norm.weight": ("mlp_norm", False),
    "ffn_gate.weight": ("w_gate", True),
    "ffn_up.weight": ("w_up", True),
    "ffn_down.weight": ("w_down", True),
}
_GLOBAL_TENSORS = {
    "token_embd.weight": ("embed", False),
    "output_norm.weight": ("final_norm", False),
    "output.weight": ("lm_head", True),
}


@dataclasses.dataclass
class GGUFCheckpoint:
  """A GGUF file read into our layout."""
  config: ModelConfig
  arrays: dict[str, np.ndarray]  # our parameter name -> float32 array
  tokenizer: Tokenizer


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
  """Undoes llama.cpp's q/k permutation on the leading (output) axis.

  `w` is [n_head*Dh, ...] (a weight [out, in] or a bias [out]). GGUF row
  h*Dh + 2j (+1) becomes HF row h*Dh + j (+ Dh/2).
  """
  out = w.shape[0]
  dh = out // n_head
  return (w.reshape(n_head, dh // 2, 2, *w.shape[1:]).swapaxes(1, 2)
          .reshape(w.shape))


def _field(fields, key: str, source: str, default: Any = ...) -> Any:
  if key in fields:
    return fields[key].contents()
  if default is ...:
    raise CheckpointError(f"{source}: metadata field {key!r} is missing.")
  return default


def config_from_gguf(fields, tensor_names: set[str], source: str
                     ) -> ModelConfig:
  """A ModelConfig from GGUF metadata (`GGUFReader.fields`) and tensor names."""
  arch = _field(fields, "general.architecture", source)
  if arch != ARCHITECTURE:
    raise CheckpointError(
        f"{source}: general.architecture={arch!r} is not supported; expected "
        f"{ARCHITECTURE!r} (Llama-family GGUF, e.g. SmolLM2).")
  get = lambda key, default=...: _field(fields, f"{arch}.{key}", source,
                                        default)
  scaling = get("rope.scaling.type", "none")
  if scaling not in ("none", None) or "rope_freqs.weight" in tensor_names:
    raise CheckpointError(
        f"{source}: RoPE scaling ({arch}.rope.scaling.type={scaling!r}, "
        f"rope_freqs tensor present={'rope_freqs.weight' in tensor_names}) is "
        "not supported for GGUF; expected plain RoPE. Load the Hugging Face "
        "checkpoint instead.")
  hidden = int(get("embedding_length"))
  heads = int(get("attention.head_count"))
  head_dim = int(get("attention.key_length", hidden // heads))
  rotary = int(get("rope.dimension_count", head_dim))
  if rotary != head_dim:
    raise CheckpointError(
        f"{source}: {arch}.rope.dimension_count={rotary} but the head width "
        f"is {head_dim}; expected full rotary (equal).")
  vocab = get("vocab_size", None)
  if vocab is None:
    vocab = len(_field(fields, "tokenizer.ggml.tokens", source))
  try:
    return ModelConfig(
        family="llama",
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(get("feed_forward_length")),
        num_layers=int(get("block_count")),
        num_heads=heads,
        num_kv_heads=int(get("attention.head_count_kv", heads)),
        head_dim=head_dim,
        rope_theta=float(get("rope.freq_base", 10000.0)),
        # f32 in the file (9.99999975e-06); round to the value it stands for.
        rms_norm_eps=float(np.format_float_positional(
            np.float32(get("attention.layer_norm_rms_epsilon")), unique=True)),
        tie_word_embeddings="output.weight" not in tensor_names,
        attention_bias="blk.0.attn_q.bias" in tensor_names,
        max_position_embeddings=int(get("context_length", 8192)),
    )
  except ModelConfigError as e:
    raise CheckpointError(f"{source}: metadata gives an invalid config: {e}"
                          ) from e


def tokenizer_from_gguf(fields, source: str) -> Tokenizer:
  """A byte-level BPE Tokenizer from `tokenizer.ggml.*` metadata."""
  kind = _field(fields, "tokenizer.ggml.model", source)
  if kind != "gpt2":
    raise CheckpointError(
        f"{source}: tokenizer.ggml.model={kind!r} is not supported; expected "
        "'gpt2' (byte-level BPE).")
  tokens = _field(fields, "tokenizer.ggml.tokens", source)
  merges = _field(fields, "tokenizer.ggml.merges", source)
  types = _field(fields, "tokenizer.ggml.token_type", source,
                 [1] * len(tokens))
  backend = tokenizers.Tokenizer(models.BPE(
      vocab={t: i for i, t in enumerate(tokens)},
      merges=[tuple(m.split(" ", 1)) for m in merges],
      fuse_unk=False, byte_fallback=False))
  backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                   use_regex=True)
  backend.decoder = decoders.ByteLevel()
  backend.add_special_tokens([
      tokenizers.AddedToken(tokens[i], special=True, normalized=False)
      for i, t in enumerate(types) if t == _CONTROL])
  backend.add_tokens([
      tokenizers.AddedToken(tokens[i], special=False, normalized=False)
      for i, t in enumerate(types) if t == _USER_DEFINED])

  def token(key):
    i = _field(fields, f"tokenizer.ggml.{key}_token_id", source, None)
    return None if i is None else tokens[int(i)]

  bos = token("bos")
  if _field(fields, "tokenizer.ggml.add_bos_token", source, False) and bos:
    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
        special_tokens=[(bos, tokens.index(bos))])
  return Tokenizer(backend, bos_token=bos, eos_token=token("eos"),
                   pad_token=token("padding"), unk_token=token("unknown"),
                   chat_template=_field(fields, "tokenizer.chat_template",
                                        source, None),
                   source=source)


def read_gguf(path: str | pathlib.Path) -> GGUFCheckpoint:
  """Config, float32 arrays (our layout) and tokenizer of a llama GGUF file."""
  import gguf  # pylint: disable=import-outside-toplevel
  from gguf.quants import dequantize  # pylint: disable=import-outside-toplevel

  path = pathlib.Path(path)
  if not path.is_file():
    raise CheckpointError(f"{path}: GGUF file not found.")
  source = str(path)
  reader = gguf.GGUFReader(str(path))
  by_name = {t.name: t for t in reader.tensors}
  config = config_from_gguf(reader.fields, set(by_name), source)
  assembler = ArrayAssembler(config, source)
  unexpected = []
  for name, tensor in by_name.items():
    layer = None
    if name.startswith("blk."):
      _, index, suffix = name.split(".", 2)
      layer = int(index)
      ours, transpose = _LAYER_TENSORS.get(suffix, (None, False))
      if layer >= config.num_layers:
        ours = None
    else:
      ours, transpose = _GLOBAL_TENSORS.get(name, (None, False))
    if ours is None or ours not in assembler.shapes:
      unexpected.append(name)
      continue
    try:
      value = np.asarray(dequantize(tensor.data, tensor.tensor_type),
                         dtype=np.float32)
    except NotImplementedError as e:
      raise CheckpointError(
          f"{source}: tensor {name!r} has quantisation "
          f"{tensor.tensor_type.name}, which gguf cannot dequantise ({e})."
          ) from e
    heads = {"wq": config.num_heads, "bq": config.num_heads,
             "wk": config.num_kv_heads, "bk": config.num_kv_heads}.get(ours)
    if heads is not None and value.shape[0] % (2 * heads) == 0:
      value = unpermute_rows(value, heads)  # else put() reports the shape
    assembler.put(ours, layer, value, transpose=transpose, file=source,
                  tensor=name)
  if unexpected:
    raise CheckpointError(f"{source}: tensor(s) the llama config has no "
                          f"place for: {sorted(unexpected)[:5]}.")
  return GGUFCheckpoint(config=config, arrays=assembler.arrays(),
                        tokenizer=tokenizer_from_gguf(reader.fields, source))
