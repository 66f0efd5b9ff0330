"""Where a decode step's time goes: the profile in launch/results/speed.md.

  python -m mgrpo_jax.bench.decode_profile [--batch=8] [--window=256]

Times, on a SmolLM2-sized decoder (random weights; speed does not depend on
them), one single-token step of the engine's forward over a KV window, with
float32 weights and with the engine's bfloat16 weights option
(`Engine(weights_dtype="bfloat16")`: matmul inputs rounded to bfloat16,
float32 accumulation and activations); separately its layer matmuls alone
and the vocabulary projection, each both ways, and token sampling.
(An earlier attempt, a bfloat16 *model*, whose activations are bfloat16 and
whose dots return bfloat16, was slower than float32 on an AMD EPYC, in a
script not kept: XLA's CPU backend converts the operands and results of
such dots around a float32 kernel. A bfloat16 x bfloat16 dot that
accumulates in float32 runs without those conversions.)
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app
from absl import flags

from mgrpo_jax.models import ModelConfig, init_model
from mgrpo_jax.models.decoder import matmul
from mgrpo_jax.sampling import forward
from mgrpo_jax.sampling.sample import sample_tokens


def _define_flags():
  """The command line's flags, defined only when this module runs as a
  program (so tests can import it beside other benchmarks' flags)."""
  return (flags.DEFINE_integer("batch", 8, "Rows decoded together."),
          flags.DEFINE_integer("window", 256, "KV-cache window slots."),
          flags.DEFINE_integer("repeats", 10, "Timed calls per figure."))


SMOLLM2 = ModelConfig(family="llama", vocab_size=49152, hidden_size=576,
                      intermediate_size=1536, num_layers=30, num_heads=9,
                      num_kv_heads=3, head_dim=64, rope_theta=1e5,
                      rms_norm_eps=1e-5, tie_word_embeddings=True)


def _ms(repeats: int, fn, *args) -> float:
  jax.block_until_ready(fn(*args))
  start = time.perf_counter()
  for _ in range(repeats):
    out = fn(*args)
  jax.block_until_ready(out)
  return (time.perf_counter() - start) / repeats * 1000


def _layer_matmuls(weights: forward.Weights, x_BxD, dot):
  for lp in weights.layers:
    q, k, v = dot(x_BxD, lp["wq"]), dot(x_BxD, lp["wk"]), dot(x_BxD, lp["wv"])
    x_BxD = x_BxD + dot(q, lp["wo"]) + 0 * (k.sum() + v.sum())
    mlp = jax.nn.silu(dot(x_BxD, lp["w_gate"])) * dot(x_BxD, lp["w_up"])
    x_BxD = x_BxD + dot(mlp, lp["w_down"])
  return x_BxD


def profile(c: ModelConfig, b: int, w: int, repeats: int
            ) -> tuple[list[tuple[str, float]], int]:
  """(what, milliseconds per call) of a decode step's parts (see the module
  docstring) for batch `b` over a window of `w` slots, and the bytes of
  layer weights a step reads."""
  model = init_model(c)
  weights = jax.jit(forward.split_weights)(model)
  rounded = jax.jit(forward.split_weights, static_argnums=(1,))(
      model, jnp.bfloat16)
  zeros = tuple(jnp.zeros((b, c.num_kv_heads, w, c.head_dim))
                for _ in range(c.num_layers))
  window = forward.Window(zeros, zeros)
  tokens, positions = jnp.ones((b, 1), jnp.int32), jnp.full((b, 1), w // 2)
  step = jax.jit(lambda wt, win, t, p: forward.hidden_states(
      c, jnp.float32, wt, t, p, win))
  x = jnp.ones((b, c.hidden_size))
  matmuls = jax.jit(lambda wt, x: _layer_matmuls(
      wt, x, lambda a, m: matmul(a, m, jnp.float32)))
  logits = jax.jit(lambda wt, h: forward.logits(jnp.float32, wt, h))
  sample = jax.jit(lambda l, k: sample_tokens(l, k, 1.0))
  layer_bytes = sum(a.nbytes for lp in weights.layers for a in lp.values())
  return [
      ("decode step: forward over the window", _ms(
          repeats, step, weights, window, tokens, positions)),
      ("decode step, bfloat16 weights", _ms(
          repeats, step, rounded, window, tokens, positions)),
      ("  layer matmuls alone, float32", _ms(repeats, matmuls, weights, x)),
      ("  layer matmuls alone, bfloat16 weights", _ms(
          repeats, matmuls, rounded, x)),
      ("vocabulary projection", _ms(repeats, logits, weights, x)),
      ("vocabulary projection, bfloat16 weights", _ms(
          repeats, logits, rounded, x)),
      ("token sampling (temperature 1)", _ms(
          repeats, sample, jnp.asarray(np.random.default_rng(0).normal(
              size=(b, c.vocab_size)), jnp.float32), jax.random.key(0))),
  ], layer_bytes


def main(argv):
  del argv
  batch_flag, window_flag, repeats_flag = _FLAGS
  c, b, w = SMOLLM2, batch_flag.value, window_flag.value
  rows, layer_bytes = profile(c, b, w, repeats_flag.value)
  print(f"batch {b}, window {w}, SmolLM2-135M shapes, jax {jax.__version__}")
  for name, ms in rows:
    print(f"{name:45s} {ms:8.1f} ms")
  print(f"layer weights read per step: {layer_bytes / 1e6:.0f} MB "
        f"({layer_bytes / 1e9 / (rows[2][1] / 1000):.1f} GB/s in the float32 "
        "matmuls)")


if __name__ == "__main__":
  _FLAGS = _define_flags()
  app.run(main)
