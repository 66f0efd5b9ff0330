"""One training step (forward + backward) of ours and of PyTorch's.

Both run the same weights in float32 on the CPU: a next-token cross-entropy
over a [B, T] batch and the gradient of every parameter, ours compiled
with the learner's options (runtime/xla_options.py). Used by
`mgrpo_jax.bench.speed`; torch is a benchmark-only dependency.
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mgrpo_jax.runtime.xla_options import training_options


def _timed(fn: Callable[[], Any], repeats: int) -> list[float]:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return times


def jax_train_step_seconds(model, tokens_BxT: np.ndarray, repeats: int = 5
                           ) -> dict[str, float]:
  """Median seconds of a jitted value_and_grad step (compile excluded)."""
  graphdef, state = nnx.split(model)

  @functools.partial(jax.jit, compiler_options=training_options())
  def step(state, tokens):
    def loss_fn(state):
      logits = nnx.merge(graphdef, state)(tokens[:, :-1])
      logp = jax.nn.log_softmax(logits, axis=-1)
      picked = jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)
      return -jnp.mean(picked)
    return jax.value_and_grad(loss_fn)(state)

  tokens = jnp.asarray(tokens_BxT)
  start = time.perf_counter()
  loss, _ = jax.block_until_ready(step(state, tokens))
  compile_s = time.perf_counter() - start
  times = _timed(lambda: jax.block_until_ready(step(state, tokens)), repeats)
  return {"seconds": statistics.median(times), "compile_seconds": compile_s,
          "loss": float(loss)}


def torch_train_step_seconds(torch_model, tokens_BxT: np.ndarray,
                             repeats: int = 5) -> dict[str, float]:
  """Median seconds of loss.backward() on a transformers model."""
  import torch  # benchmark-only dependency

  tokens = torch.as_tensor(np.asarray(tokens_BxT), dtype=torch.long)
  torch_model.train()

  def step():
    torch_model.zero_grad(set_to_none=True)
    logits = torch_model(tokens[:, :-1]).logits
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss.backward()
    return float(loss.detach())

  loss = step()  # warm-up
  times = _timed(step, repeats)
  return {"seconds": statistics.median(times), "loss": loss}
