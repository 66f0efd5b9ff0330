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


# ------------------------------------------------------------- placements

def _mesh(n):
  from jax.sharding import Mesh
  return Mesh(np.array(jax.devices()[:n]), ("fsdp",))


def _placed(x, n, spec=()):
  from jax.sharding import NamedSharding, PartitionSpec
  return jax.device_put(x, NamedSharding(_mesh(n), PartitionSpec(*spec)))


def test_a_program_s_key_holds_where_its_arguments_lie():
  programs, _ = _programs(strict=False)
  x = np.ones((4, 8), np.float32)
  keys = {programs.key((2, _placed(x, n, spec), np.ones(4, np.float32)))
          for n, spec in ((1, ()), (2, ()), (2, ("fsdp",)), (4, ("fsdp",)))}
  assert len(keys) == 4
  # A one-device mesh and its device place the same data alike; NumPy and
  # uncommitted arrays are JAX's to place: no placement.
  assert programs.key((2, _placed(x, 1), x)) == programs.key(
      (2, jax.device_put(x, jax.devices()[0]), x))
  assert programs.key((2, x, x)) == programs.key((2, jnp.asarray(x), x))
  # A ShapeDtypeStruct with the arrays' sharding is their program.
  from jax.sharding import NamedSharding, PartitionSpec
  spec = jax.ShapeDtypeStruct((4, 8), jnp.float32, sharding=NamedSharding(
      _mesh(2), PartitionSpec("fsdp")))
  assert programs.key((2, spec, x)) == programs.key(
      (2, _placed(x, 2, ("fsdp",)), x))


def test_arguments_placed_otherwise_run_their_own_program_or_are_refused():
  x, y = np.ones((4, 8), np.float32), np.ones(4, np.float32)
  on_two = _placed(x, 2, ("fsdp",))
  lenient, _ = _programs(strict=False)
  lenient.precompile([(2, on_two, y)])
  out = lenient(2, _placed(x, 4, ("fsdp",)), y)  # Compiled late, counted.
  np.testing.assert_array_equal(np.asarray(out), np.full(4, 17.0))
  assert lenient.late == 1 and lenient.count == 2
  strict, traces = _programs(strict=True)
  strict.precompile([(2, on_two, y)])
  with pytest.raises(ShapeError) as error:
    strict(2, _placed(x, 4, ("fsdp",)), y)
  message = str(error.value)
  assert "\n" not in message
  assert message.startswith("program 'scaled': argument #1 is placed as "
                            "NamedSharding(mesh=Mesh('fsdp': 4")
  assert "but the program of its shape was compiled for NamedSharding(" \
         "mesh=Mesh('fsdp': 2" in message
  assert "strict_shapes" in message and len(traces) == 1


def _fixed_programs(strict):
  """`scaled` whose first array is a fixed argument (a layout stands for
  it), with named arguments."""
  jitted = jax.jit(lambda n, w, y: (w * n).sum(axis=-1) + y,
                   static_argnums=(0,))
  return Programs("fixed", jitted, static_argnums=(0,), fixed_argnums=(1,),
                  strict=strict, arg_names=("n", "weights", "y"))


def test_a_fixed_argument_that_moved_is_named_never_jax_s_raw_error():
  from mgrpo_jax.runtime.programs import layout_of
  x, y = np.ones((4, 8), np.float32), np.ones(4, np.float32)
  on_two, on_four = _placed(x, 2, ("fsdp",)), _placed(x, 4, ("fsdp",))
  layout = layout_of((on_two,))  # The promise, which on_four breaks.
  strict = _fixed_programs(strict=True)
  strict.precompile([(2, on_two, y)], layout=layout)
  with pytest.raises(ShapeError, match=(
      r"^program 'fixed': argument weights is placed as NamedSharding\(mesh="
      r"Mesh\('fsdp': 4.*but the program was compiled for NamedSharding\("
      r"mesh=Mesh\('fsdp': 2")):
    strict.run((2, on_four, y), strict=True, layout=layout)
  lenient = _fixed_programs(strict=False)
  lenient.precompile([(2, on_two, y)], layout=layout)
  for _ in range(2):  # Compiled once, then found.
    out = lenient.run((2, on_four, y), strict=False, layout=layout)
    np.testing.assert_array_equal(np.asarray(out), np.full(4, 17.0))
  assert lenient.late == 1 and lenient.count == 2


def test_other_errors_of_a_program_pass_through():
  programs = _fixed_programs(strict=False)
  with pytest.raises(TypeError):
    programs.run((2, np.ones((4, 8), np.float32), "not an array"),
                 strict=False)
