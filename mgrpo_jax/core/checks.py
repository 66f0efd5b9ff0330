"""Argument checks shared by the core functions.

Every check runs at trace time (on shapes, dtypes and Python values), so a bad
argument fails before any compute with a message that names the function, the
argument, what was expected and what was found. Value checks that need array
contents (group ids in range, counts >= 0) run eagerly when the values are
concrete and through a host callback when they are traced under `jax.jit`.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import jax
import jax.numpy as jnp
import numpy as np


def fail(fn: str, arg: str, expected: str, got: Any) -> None:
  """Raises a ValueError in the project's one error format."""
  raise ValueError(f"{fn}: argument '{arg}' must be {expected}; got {got}.")


def check_array(
    fn: str,
    arg: str,
    x: Any,
    *,
    ndim: int,
    kinds: str,
) -> jax.Array:
  """Checks rank and dtype kind of `x` and returns it as a JAX array.

  Args:
    fn: name of the public function, for the message.
    arg: name of the argument, for the message.
    x: the value (array-like).
    ndim: required rank.
    kinds: allowed dtype kinds, any of "f" (floating), "i" (integer, signed or
      unsigned) and "b" (bool).
  """
  if not hasattr(x, "shape") or not hasattr(x, "dtype"):
    x = np.asarray(x)
  if x.ndim != ndim:
    fail(fn, arg, f"a {ndim}-D array", f"shape {tuple(x.shape)}")
  dtype = jnp.dtype(x.dtype)
  ok = (
      ("f" in kinds and jnp.issubdtype(dtype, jnp.floating))
      or ("i" in kinds and jnp.issubdtype(dtype, jnp.integer))
      or ("b" in kinds and dtype == jnp.bool_)
  )
  if not ok:
    names = {"f": "floating", "i": "integer", "b": "bool"}
    wanted = " or ".join(names[k] for k in kinds)
    fail(fn, arg, f"of {wanted} dtype", f"dtype {dtype}")
  return jnp.asarray(x)


def check_same_shape(
    fn: str, arg: str, x: jax.Array, ref_arg: str, shape: Sequence[int]
) -> None:
  """Checks that `x` has exactly `shape` (the shape of argument `ref_arg`)."""
  if tuple(x.shape) != tuple(shape):
    fail(fn, arg, f"of shape {tuple(shape)} like '{ref_arg}'",
         f"shape {tuple(x.shape)}")


def check_choice(fn: str, arg: str, value: Any, choices: Iterable[str]) -> None:
  """Checks that `value` is one of `choices`."""
  choices = sorted(choices)
  if value not in choices:
    fail(fn, arg, f"one of {choices}", repr(value))


def check_static_int(fn: str, arg: str, value: Any, *, minimum: int) -> int:
  """Checks that `value` is a Python int >= minimum (a static argument)."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    fail(fn, arg, f"a Python int >= {minimum} (it fixes a shape, so it "
         "cannot be a traced value; pass it as a static argument)",
         f"{value!r} of type {type(value).__name__}")
  if value < minimum:
    fail(fn, arg, f"an int >= {minimum}", repr(value))
  return int(value)


def check_static_float(
    fn: str, arg: str, value: Any, *, minimum: float, maximum: float | None = None
) -> float:
  """Checks that `value` is a Python number in [minimum, maximum]."""
  if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
    fail(fn, arg, "a Python number", f"{value!r} of type {type(value).__name__}")
  value = float(value)
  if not np.isfinite(value) or value < minimum or (
      maximum is not None and value > maximum):
    bound = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
    fail(fn, arg, f"a finite number {bound}", repr(value))
  return value


def check_values_in_range(
    fn: str, arg: str, x: jax.Array, low: int, high: int | None
) -> None:
  """Checks low <= x < high elementwise (high=None: no upper bound).

  Eager when `x` is concrete; under tracing a host callback raises the same
  message when the compiled function runs.
  """
  bound = f"[{low}, {high if high is not None else 'inf'})"

  def _check(values: np.ndarray) -> None:
    values = np.asarray(values)
    bad = values < low
    if high is not None:
      bad |= values >= high
    if bad.any():
      where = np.flatnonzero(bad.reshape(-1))[:5].tolist()
      found = values.reshape(-1)[where].tolist()
      fail(fn, arg, f"in {bound} everywhere",
           f"{found} at flat positions {where}")

  try:
    concrete = np.asarray(x)
  except (jax.errors.TracerArrayConversionError,
          jax.errors.ConcretizationTypeError):
    jax.debug.callback(_check, x)
  else:
    _check(concrete)
