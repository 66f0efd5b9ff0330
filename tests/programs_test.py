"""runtime/programs.py: a jitted function's programs compiled ahead of
time, looked up by shape, and nothing compiled late in strict mode."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax.runtime.programs import Programs, ShapeError


def _scaled(traces, n, x, y):
  traces.append(x.shape)
  return (x * n).sum(axis=-1) + y


def _programs(strict):
  traces = []
  jitted = jax.jit(functools.partial(_scaled, traces), static_argnums=(0,),
                   donate_argnums=())
  return Programs("scaled", jitted, static_argnums=(0,), strict=strict), traces


def _spec(*shape):
  return jax.ShapeDtypeStruct(shape, jnp.float32)


def test_precompiled_shapes_run_without_tracing_again():
  programs, traces = _programs(strict=True)
  seconds = programs.precompile([(2, _spec(4, 8), _spec(4)),
                                 (2, _spec(8, 8), _spec(8)),
                                 (3, _spec(4, 8), _spec(4)),
                                 (2, _spec(4, 8), _spec(4))], threads=2)
  assert programs.count == 3 and seconds > 0  # The repeat compiled once.
  assert len(traces) == 3
  x = np.ones((4, 8), np.float32)
  out = programs(3, x, np.zeros(4, np.float32))
  np.testing.assert_array_equal(np.asarray(out), np.full(4, 24.0))
  programs(2, jnp.ones((8, 8)), jnp.ones(8))  # Arrays of any kind.
  assert len(traces) == 3 and programs.late == 0


def test_a_strict_call_outside_the_set_names_the_program_and_shape():
  programs, traces = _programs(strict=True)
  programs.precompile([(2, _spec(4, 8), _spec(4))])
  with pytest.raises(ShapeError, match=(
      r"program 'scaled': a call with static arguments \(2,\) and arrays "
      r"\[\(\(6, 8\), 'float32'\), \(\(6,\), 'float32'\)\] .* outside the 1 "
      r"program\(s\) compiled at start-up")):
    programs(2, np.ones((6, 8), np.float32), np.ones(6, np.float32))
  with pytest.raises(ShapeError, match=r"'int32'"):  # dtype is the shape too.
    programs(2, np.ones((4, 8), np.int32), np.ones(4, np.float32))
  assert len(traces) == 1 and programs.count == 1


def test_a_lenient_call_outside_the_set_compiles_and_is_counted():
  programs, _ = _programs(strict=False)
  programs(5, np.ones((3, 2), np.float32), np.ones(3, np.float32))
  programs(5, np.ones((3, 2), np.float32), np.ones(3, np.float32))
  assert programs.late == 1 and programs.count == 1
  # A Python scalar is weakly typed: another program than a float32 array.
  assert programs.key((5, np.ones(2, np.float32), 1.0)) != programs.key(
      (5, np.ones(2, np.float32), np.float32(1.0)))
