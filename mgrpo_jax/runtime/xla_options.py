"""Per-computation XLA compiler options: which library runs big matmuls.

On the CPU backend, XLA can hand dot products to YNNPACK (an experimental
option of XLA's CPU compiler) instead of its own emitter. Measured on a
2-core AMD EPYC (jax 0.10.2, SmolLM2-135M float32): a [4, 128] forward +
backward took 3.12-3.24 s with it against 3.63-3.84 s without, but a
decode step (a handful of rows per matmul) ran 2-3x slower and a prefill
of 32 x 128 tokens 6.9 s against 5.6 s (forward-only matmuls, where XLA's
emitter already runs near this CPU's peak). So it is asked for per jitted
computation, only for gradients (the learner's update, SFT): `jax.jit(fn,
compiler_options=training_options())`.

`$MGRPO_JAX_CPU_MATMUL` chooses: `ynn` (the default) or `xla` (XLA's own
emitter everywhere); any other value is refused, naming the variable.
Other backends (TPU, GPU) get no options. Where this jaxlib does not know
the option (it is experimental and may be renamed), a one-time probe finds
out and XLA's emitter is used.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import jax
import jax.numpy as jnp

MATMUL_ENV = "MGRPO_JAX_CPU_MATMUL"
CHOICES = ("ynn", "xla")
_YNN = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}


def cpu_matmul_choice() -> str:
  """$MGRPO_JAX_CPU_MATMUL (default "ynn"); a ValueError for another value."""
  value = os.environ.get(MATMUL_ENV, "ynn").strip().lower() or "ynn"
  if value not in CHOICES:
    raise ValueError(f"{MATMUL_ENV}={os.environ[MATMUL_ENV]!r}: expected one "
                     f"of {', '.join(CHOICES)} (ynn: YNNPACK runs the CPU "
                     "matmuls of training; xla: XLA's own).")
  return value


@functools.lru_cache(maxsize=None)
def _ynn_compiles() -> bool:
  """Whether this jaxlib's CPU compiler accepts the YNNPACK option."""
  try:
    x = jnp.ones((8, 8), jnp.float32)
    jax.jit(jnp.dot, compiler_options=_YNN).lower(x, x).compile()
  except Exception:  # pylint: disable=broad-except
    return False
  return True


def training_options() -> dict[str, Any] | None:
  """Compiler options for a computation that takes gradients: YNNPACK dots
  on the CPU backend (unless $MGRPO_JAX_CPU_MATMUL=xla or this jaxlib lacks
  the option), else None (XLA's defaults)."""
  choice = cpu_matmul_choice()
  if choice != "ynn" or jax.default_backend() != "cpu":
    return None
  return dict(_YNN) if _ynn_compiles() else None
