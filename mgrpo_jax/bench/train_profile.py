"""Where a training step's time goes (launch/results/speed.md's profile).

  python -m mgrpo_jax.bench.train_profile [--batch=4] [--length=128]
      [--repeats=4]

Times, on SmolLM2-135M-Instruct in float32 with the learner's compiler
options, the benchmark's train step (`bench/train_step.py`: next-token
cross-entropy over [B, T] and the gradient of every parameter) and its
parts: the forward alone, forward + backward without the vocabulary
projection and loss (the transformer layers), and the same step with each
layer's weights as separate arrays and the layers unrolled, the layout the
sampler decodes with (`sampling/forward.py`), instead of the learner's
stacked weights in a `lax.scan`. Each row gives the median seconds of
--repeats calls after the first (compilation), and that compilation.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from absl import app
from absl import flags
from flax import nnx

from mgrpo_jax.bench.common import machine
from mgrpo_jax.models.decoder import (Decoder, attention, finish_layer,
                                      project_qkv, rms_norm,
                                      rope_inverse_frequencies)
from mgrpo_jax.runtime.xla_options import training_options
from mgrpo_jax.sampling import forward


def _define_flags():
  """The command line's flags, defined only when this module runs as a
  program (so tests can import it beside other benchmarks' flags)."""
  return (flags.DEFINE_integer("batch", 4, "Sequences per step."),
          flags.DEFINE_integer("length", 128, "Tokens per sequence."),
          flags.DEFINE_integer("repeats", 4, "Timed calls per row."))


def _nll(logits_BxTxV: jax.Array, targets_BxT: jax.Array) -> jax.Array:
  logp = jax.nn.log_softmax(logits_BxTxV, axis=-1)
  return -jnp.mean(jnp.take_along_axis(logp, targets_BxT[..., None], -1))


def _positions(tokens_BxT: jax.Array) -> jax.Array:
  return jnp.broadcast_to(jnp.arange(tokens_BxT.shape[1]), tokens_BxT.shape)


def _per_layer_hidden(model: Decoder, weights: forward.Weights,
                      tokens_BxT: jax.Array) -> jax.Array:
  """`Decoder.hidden_states` without a cache, over per-layer arrays."""
  c, dt = model.config, jnp.float32
  positions_BxT = _positions(tokens_BxT)
  visible_BxTxT = positions_BxT[:, None, :] <= positions_BxT[:, :, None]
  inv_freq = rope_inverse_frequencies(c)
  h = weights.embed[tokens_BxT]
  for lp in weights.layers:
    q, k, v = project_qkv(c, dt, lp, h, positions_BxT, inv_freq)
    attn = attention(q, jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2),
                     visible_BxTxT, dt)
    h = finish_layer(c, dt, lp, h, attn)
  return rms_norm(h, weights.final_norm, c.rms_norm_eps)


def _timed(fn: Callable, args: tuple, repeats: int
           ) -> tuple[float, float, float]:
  """(median seconds of `repeats` calls, seconds of the first call, the
  loss it returned)."""
  start = time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  compile_s = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  loss = out[0] if isinstance(out, tuple) else out
  return statistics.median(times), compile_s, float(loss)


def profile(model: Decoder, tokens_BxT1: np.ndarray, repeats: int
            ) -> list[tuple[str, float, float, float]]:
  """(what, median seconds, compile seconds, loss) of each part of a train
  step over `tokens_BxT1` ([B, T + 1] ids: inputs and their next tokens);
  the per-layer step's loss is the learner's (tests check)."""
  graphdef, state = nnx.split(model)
  tokens = jnp.asarray(tokens_BxT1)
  jit = lambda f: jax.jit(f, compiler_options=training_options())

  def full(state, tokens):
    logits = nnx.merge(graphdef, state)(tokens[:, :-1])
    return _nll(logits, tokens[:, 1:])

  def layers_only(state, tokens):
    m = nnx.merge(graphdef, state)
    h, _ = m.hidden_states(tokens[:, :-1], _positions(tokens[:, :-1]))
    return jnp.mean(h * h)

  def per_layer(weights, tokens):
    h = _per_layer_hidden(model, weights, tokens[:, :-1])
    return _nll(forward.logits(jnp.float32, weights, h), tokens[:, 1:])

  weights = jax.jit(forward.split_weights)(model)
  rows = [
      ("forward + backward (the learner's stacked layers, lax.scan)",
       jit(jax.value_and_grad(full)), state),
      ("  forward alone", jit(full), state),
      ("  forward + backward of the layers alone (no vocabulary, no loss)",
       jit(jax.value_and_grad(layers_only)), state),
      ("forward + backward, per-layer weights, layers unrolled",
       jit(jax.value_and_grad(per_layer)), weights),
  ]
  return [(name, *_timed(fn, (params, tokens), repeats))
          for name, fn, params in rows]


def main(argv):
  del argv
  from mgrpo_jax.models.loading import load_model
  batch_flag, length_flag, repeats_flag = _FLAGS
  model, _ = load_model("smollm2-135m-instruct")
  tokens = np.random.default_rng(0).integers(
      0, model.config.vocab_size,
      size=(batch_flag.value, length_flag.value + 1))
  print(f"train step [{batch_flag.value}, {length_flag.value}], "
        f"SmolLM2-135M-Instruct float32, {machine()}, jax {jax.__version__}"
        f", median of {repeats_flag.value}")
  for name, seconds, compile_s, _ in profile(model, tokens,
                                             repeats_flag.value):
    print(f"{name:68s} {seconds:7.3f} s  (compile {compile_s:5.1f} s)")


if __name__ == "__main__":
  _FLAGS = _define_flags()
  app.run(main)
