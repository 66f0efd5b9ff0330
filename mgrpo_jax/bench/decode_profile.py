"""Where a decode step's time goes: the README's speed profile.

  python -m mgrpo_jax.bench.decode_profile [--batch=8] [--window=256]

Times, on a SmolLM2-sized decoder (random weights; speed does not depend on
them), one single-token step of the engine's forward over a KV window, and
separately its layer matmuls alone (float32, and bfloat16 weights with
float32 accumulation), the vocabulary projection and token sampling.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app
from absl import flags

from mgrpo_jax.models import ModelConfig, init_model
from mgrpo_jax.sampling import forward
from mgrpo_jax.sampling.sample import sample_tokens

_BATCH = flags.DEFINE_integer("batch", 8, "Rows decoded together.")
_WINDOW = flags.DEFINE_integer("window", 256, "KV-cache window slots.")
_REPEATS = flags.DEFINE_integer("repeats", 10, "Timed calls per figure.")

SMOLLM2 = ModelConfig(family="llama", vocab_size=49152, hidden_size=576,
                      intermediate_size=1536, num_layers=30, num_heads=9,
                      num_kv_heads=3, head_dim=64, rope_theta=1e5,
                      rms_norm_eps=1e-5, tie_word_embeddings=True)


def _ms(fn, *args) -> float:
  jax.block_until_ready(fn(*args))
  start = time.perf_counter()
  for _ in range(_REPEATS.value):
    out = fn(*args)
  jax.block_until_ready(out)
  return (time.perf_counter() - start) / _REPEATS.value * 1000


def _layer_matmuls(weights: forward.Weights, x_BxD, dot):
  for lp in weights.layers:
    q, k, v = dot(x_BxD, lp["wq"]), dot(x_BxD, lp["wk"]), dot(x_BxD, lp["wv"])
    x_BxD = x_BxD + dot(q, lp["wo"]) + 0 * (k.sum() + v.sum())
    mlp = jax.nn.silu(dot(x_BxD, lp["w_gate"])) * dot(x_BxD, lp["w_up"])
    x_BxD = x_BxD + dot(mlp, lp["w_down"])
  return x_BxD


def main(argv):
  del argv
  c, b, w = SMOLLM2, _BATCH.value, _WINDOW.value
  weights = jax.jit(forward.split_weights)(init_model(c))
  zeros = tuple(jnp.zeros((b, c.num_kv_heads, w, c.head_dim))
                for _ in range(c.num_layers))
  window = forward.Window(zeros, zeros)
  tokens, positions = jnp.ones((b, 1), jnp.int32), jnp.full((b, 1), w // 2)
  step = jax.jit(lambda wt, win, t, p: forward.hidden_states(
      c, jnp.float32, wt, t, p, win))
  x = jnp.ones((b, c.hidden_size))
  f32 = jax.jit(lambda wt, x: _layer_matmuls(wt, x, jnp.dot))
  bf16_weights = jax.tree.map(lambda a: a.astype(jnp.bfloat16), weights)
  bf16 = jax.jit(lambda wt, x: _layer_matmuls(wt, x, lambda a, m: jnp.dot(
      a.astype(jnp.bfloat16), m, preferred_element_type=jnp.float32)))
  logits = jax.jit(lambda wt, h: forward.logits(jnp.float32, wt, h))
  sample = jax.jit(lambda l, k: sample_tokens(l, k, 1.0))
  rows = [
      ("decode step: forward over the window", _ms(step, weights, window,
                                                  tokens, positions)),
      ("  layer matmuls alone, float32", _ms(f32, weights, x)),
      ("  layer matmuls alone, bfloat16 weights", _ms(bf16, bf16_weights, x)),
      ("vocabulary projection", _ms(logits, weights, x)),
      ("token sampling (temperature 1)", _ms(
          sample, jnp.asarray(np.random.default_rng(0).normal(
              size=(b, c.vocab_size)), jnp.float32), jax.random.key(0))),
  ]
  layer_bytes = sum(a.size * 4 for lp in weights.layers for a in lp.values())
  print(f"batch {b}, window {w}, SmolLM2-135M shapes, jax {jax.__version__}")
  for name, ms in rows:
    print(f"{name:45s} {ms:8.1f} ms")
  print(f"layer weights read per step: {layer_bytes / 1e6:.0f} MB "
        f"({layer_bytes / 1e9 / (rows[1][1] / 1000):.1f} GB/s in the float32 "
        "matmuls)")


if __name__ == "__main__":
  app.run(main)
