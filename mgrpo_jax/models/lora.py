"""Low-rank adapters (LoRA) on a decoder's stacked weights.

An adapter on a layer-stacked weight W [L, in, out] is a pair A [L, in,
r], B [L, r, out], and the layer computes x W + scale (x A) B, scale =
alpha / r.
A starts random, B at zero, so a fresh adapter leaves the model as it is.
Only adapters train (`Learner` with `lora_rank` > 0); the base weights
stay frozen and can be shared by several agents' adapters; `merged`
folds adapters into a copy of the weights (a sampler's).

  adapters = init_adapters(model.config, ("wq", "wv"), rank=8, alpha=16,
                           key=jax.random.key(0))
  logits = model(tokens, adapters=adapters)
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from mgrpo_jax.models.config import ModelConfig

# Parameters an adapter may target: the layer-stacked matrices (a mixture
# of experts' expert matrices not yet: its router and attention can).
TARGETS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "router")


class Adapters(NamedTuple):
  """Each target's (A, B) and the scale alpha / r. `weights` is what
  trains; `scale` is a constant."""
  weights: Mapping[str, tuple[jax.Array, jax.Array]]
  scale: float


def check_targets(config: ModelConfig, targets: Sequence[str],
                  field: str = "lora_targets") -> tuple[str, ...]:
  """The targets, each a matrix this model has (a ValueError naming
  `field`, the target and the model's choices otherwise)."""
  from mgrpo_jax.models.build import expected_shapes  # pylint: disable=g-import-not-at-top
  have = [t for t in TARGETS if t in expected_shapes(config)]
  targets = tuple(targets)
  bad = [t for t in targets if t not in have]
  if bad or not targets:
    raise ValueError(f"{field}={list(targets)}: {bad or 'none'} names no "
                     f"adaptable matrix of this {config.family} model; "
                     f"expected some of {have}.")
  return targets


def init_adapters(config: ModelConfig, targets: Sequence[str], *, rank: int,
                  alpha: float, key: jax.Array, dtype=jnp.float32) -> Adapters:
  """Fresh adapters: A ~ N(0, 1 / in), B = 0 (the identity)."""
  if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
    raise ValueError(f"lora_rank={rank!r}: expected an integer >= 1.")
  from mgrpo_jax.models.build import expected_shapes  # pylint: disable=g-import-not-at-top
  shapes = expected_shapes(config)
  weights = {}
  for i, name in enumerate(check_targets(config, targets)):
    *lead, fan_in, fan_out = shapes[name]
    a = jax.random.normal(jax.random.fold_in(key, i),
                          (*lead, fan_in, rank)) * fan_in ** -0.5
    weights[name] = (a.astype(dtype), jnp.zeros((*lead, rank, fan_out),
                                                dtype))
  return Adapters(weights, float(alpha) / rank)


def layer_adapters(adapters: Adapters | None) -> dict[str, jax.Array]:
  """Stacked adapter arrays to scan with the layer parameters: name@a,
  name@b."""
  if adapters is None:
    return {}
  out = {}
  for name, (a, b) in adapters.weights.items():
    out[f"{name}@a"], out[f"{name}@b"] = a, b * adapters.scale
  return out


def merged(weights: Mapping[str, Any], adapters: Adapters) -> dict[str, Any]:
  """`weights` (our names) with each adapter folded in: W + scale A B."""
  out = dict(weights)
  for name, (a, b) in adapters.weights.items():
    w = out[name]
    delta = jnp.einsum("...ir,...ro->...io", a.astype(jnp.float32),
                       b.astype(jnp.float32)) * adapters.scale
    out[name] = (w.astype(jnp.float32) + delta).astype(w.dtype)
  return out


def num_params(adapters: Adapters) -> int:
  return sum(a.size + b.size for a, b in adapters.weights.values())


def merged_state(state: Any, adapters: Adapters) -> Any:
  """An nnx.State of a decoder's weights with the adapters folded in (on
  the devices the weights are on); `state` itself is unchanged."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  flat = list(nnx.to_flat_state(state))
  names = [".".join(map(str, path)) for path, _ in flat]
  out = merged({n: v[...] for n, (_, v) in zip(names, flat)}, adapters)
  return nnx.from_flat_state([(path, v.replace(out[n]))
                              for n, (path, v) in zip(names, flat)])
