"""The dtypes a sampler's weights may take, and how far its recorded
log-probs are from the float32 model's.

A sampler that holds its weights in bfloat16 (`Engine(weights_dtype=...)`)
samples from a slightly different policy than the float32 learner scores:
under a float32 model each matmul rounds its input to bfloat16 and
accumulates in float32, while norms, attention, the cache and sampling stay
float32, so a decode step reads half the bytes. In training
`agents.sampler_dtype="bfloat16"` gives every agent's sampler that option;
the learners keep float32 and correct the gap as they correct stale data
(`learner.*.off_policy`, which must then be "token" or "sequence").
`logp_gap` measures that gap on generated tokens: each prompt + generation
is scored by the model's own full forward (`Decoder.__call__`, as the
learner scores), log_softmax(logits / T), and compared with the log-probs
the engine recorded for the same tokens.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mgrpo_jax.models.decoder import Decoder

# dtypes a sampler's weight matrices may be held in (`Engine(weights_dtype)`).
WEIGHTS_DTYPES = ("float32", "bfloat16")


def weights_dtype_name(value) -> str | None:
  """The dtype name `value` asks for (None stays None: the model's own)."""
  if value is None:
    return None
  try:
    name = jnp.dtype(value).name
  except TypeError:
    name = None
  if name not in WEIGHTS_DTYPES:
    raise ValueError(f"Engine weights_dtype={value!r}: expected one of "
                     f"{list(WEIGHTS_DTYPES)} (or None: the model's own).")
  return name


def logp_gap(model: Decoder, prompts: Sequence[Sequence[int]],
             results: Sequence, temperature: float = 1.0) -> dict[str, float]:
  """Mean and largest |engine log-prob - model log-prob| over every
  generated token of `results` (engine `Result`s, one per prompt).

  Temperature 0 (greedy) scores at T = 1, as the engine records greedy
  log-probs.
  """
  if len(prompts) != len(results):
    raise ValueError(f"logp_gap: {len(prompts)} prompts but {len(results)} "
                     "results; expected one result per prompt.")
  if not any(len(r.tokens) for r in results):
    raise ValueError("logp_gap: no generated tokens to compare.")
  rows = [list(p) + list(r.tokens) for p, r in zip(prompts, results)]
  length = max(map(len, rows))
  tokens_BxT = np.zeros((len(rows), length), np.int32)
  for i, row in enumerate(rows):
    tokens_BxT[i, :len(row)] = row
  t = temperature if temperature > 0 else 1.0
  graphdef, state = nnx.split(model)
  logp_BxT = np.asarray(_scores(graphdef, state, jnp.asarray(tokens_BxT), t))
  gaps = []
  for i, (p, r) in enumerate(zip(prompts, results)):
    # Token j of the generation sits at len(p) + j; the logits before it at
    # len(p) + j - 1, which is where _scores puts its log-prob.
    ours = logp_BxT[i, len(p) - 1:len(p) - 1 + len(r.tokens)]
    gaps.append(np.abs(ours - np.asarray(r.logprobs, np.float32)))
  gap = np.concatenate(gaps)
  return {"mean_abs": float(gap.mean()), "max_abs": float(gap.max()),
          "tokens": int(gap.size)}


@functools.partial(jax.jit, static_argnums=(0,))
def _scores(graphdef: nnx.GraphDef, state: nnx.State, tokens_BxT: jax.Array,
            temperature: float) -> jax.Array:
  """[B, T - 1]: log-prob of token t + 1 given tokens [0, t]."""
  logits_BxTxV = nnx.merge(graphdef, state)(tokens_BxT[:, :-1])
  logp_BxTxV = jax.nn.log_softmax(logits_BxTxV / temperature, axis=-1)
  return jnp.take_along_axis(logp_BxTxV, tokens_BxT[:, 1:, None],
                             axis=-1)[..., 0]


def describe(state: Any) -> tuple[Any, list[tuple[Any, Any]]]:
  """Tree structure and leaf (shape, dtype) of a model state: what new
  weights must match to replace a sampler's (`Engine.update_weights`)."""
  leaves = [(jnp.shape(x), jnp.result_type(x))
            for x in jax.tree.leaves(state)]
  return jax.tree.structure(state), leaves
