"""Llama / Qwen2 / Qwen3 / Qwen3-MoE decoders in Flax NNX: config, weights,
tokenizer.

  from mgrpo_jax.models import load_model
  model, tokenizer = load_model("smollm2-135m-instruct")   # or an HF directory
  text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}])
  logits_BxTxV = model(jnp.asarray([tokenizer.encode(text)]))

  config.py           ModelConfig, read from / written to config.json
  decoder.py          the decoder, KV cache, RoPE
  moe.py              Qwen3-MoE's mixture of experts: router, grouped
                      expert matmuls, load-balancing loss, expert load
  lora.py             low-rank adapters: init (the identity), merge
  sharding.py         the logical-axis -> mesh-axis rules table
  build.py            models born sharded (init or from host arrays)
  hf_checkpoint.py    Hugging Face safetensors read / write
  tensor_views.py     a checkpoint's parameters read only where a shard
                      needs them (multi-host loading)
  gguf_checkpoint.py  llama GGUF read (dequantise, un-permute, tokenizer)
  tokenizer.py        tokenizer + chat template (jinja2)
  tiny.py             the tiny model family: a BPE trained on given text, a
                      small Llama
  loading.py          load_model(path or name), the converted-model cache
"""

from mgrpo_jax.models.build import init_model
from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.models.decoder import Decoder, KVCache
from mgrpo_jax.models.hf_checkpoint import CheckpointError, save_hf_checkpoint
from mgrpo_jax.models.loading import load_model
from mgrpo_jax.models.tokenizer import Tokenizer

__all__ = [
    "CheckpointError",
    "Decoder",
    "KVCache",
    "ModelConfig",
    "Tokenizer",
    "init_model",
    "load_model",
    "save_hf_checkpoint",
]
