"""sampling/shapes.py: the engine's padded sizes, open or closed, and an
engine on a closed set compiled at start-up (nothing compiles after it)."""

import jax
import numpy as np
import pytest

from mgrpo_jax.runtime.programs import ShapeError
from mgrpo_jax.sampling import Engine, SamplingParams
from mgrpo_jax.sampling.shapes import Shapes
from model_test_utils import logprob_tolerance
from sampling_engine_test import _model, _prompt

# One window each (96 slots), rows 4 (decode) or 1, 2, 4: 11 programs.
CLOSED = dict(closed=True, row_floor=4, decode_window_count=1,
              prefill_window_count=1, prefill_chunk=32)


def test_open_ladders_are_todays_buckets():
  shapes = Shapes(64, 1024)
  assert shapes.decode_rows(20) == 24 and shapes.call_rows(20) == 32
  assert shapes.decode_window(65) == 128 == shapes.prefill_window(100)
  assert shapes.decode_window(5000) == 1024  # Capped at the cache length.
  assert shapes.prompt_tokens(17) == 32 and shapes.chunk is None
  assert shapes.prefix(300, 512) == 288  # Multiples of 32: as it comes.


def test_a_closed_set_is_short_and_lists_every_program():
  shapes = Shapes(64, 1024, closed=True, row_floor=8)
  assert shapes.decode_row_sizes == (8, 16, 32, 64)
  assert shapes.decode_windows == (128, 256, 512, 1024)
  assert shapes.prefill_windows == (512, 1024)
  assert shapes.prompt_sizes == (16, 32, 64, 128, 256)
  assert shapes.decode_rows(3) == 8 and shapes.decode_rows(20) == 32
  assert shapes.decode_window(65) == 128 and shapes.prefill_window(65) == 512
  assert shapes.prefix(300, 1024) == 256  # A quarter or a half of W, or 0.
  assert shapes.prefix(600, 1024) == 512 and shapes.prefix(200, 1024) == 0
  assert shapes.chunk == 256
  programs = shapes.programs()
  assert len(programs["decode"]) == 4 * 4 * 3
  assert len(programs["prefill"]) == 7 * 5 * 2
  assert len(programs["copy"]) == 7 * 2
  assert shapes.count() == 132
  for rows, window, prefix in programs["decode"]:
    assert prefix in (0, window // 4, window // 2) and rows >= 8


@pytest.mark.parametrize("field, value", [("max_rows", 0),
                                          ("prefill_chunk", -1),
                                          ("decode_window_count", 1.5)])
def test_bad_settings_are_named(field, value):
  with pytest.raises(ValueError, match=f"Shapes {field}={value!r}: expected "
                     "a positive integer"):
    Shapes(**{"max_rows": 8, "cache_len": 64, field: value})
  with pytest.raises(ValueError, match="prefill_chunk=8: expected at least "
                     "min_prompt=16"):
    Shapes(8, 64, closed=True, prefill_chunk=8)


def _engine(shapes=None, strict=False):
  return Engine(_model(), max_conversations=4, cache_len=96, chunk_steps=4,
                min_window=32, min_prompt_bucket=16, shapes=shapes,
                strict_shapes=strict)


def _turns(engine, params):
  """Two turns of four conversations: two share a prompt, one prompt is
  longer than the closed set's prefill chunk, then tool results appended.
  Each result with the whole conversation it ends."""
  prompts = [_prompt(40, 1), _prompt(9, 2), _prompt(9, 2), _prompt(20, 3)]
  first = engine.generate(prompts, params, jax.random.key(0), keep=True)
  for i, r in enumerate(first):
    engine.extend(r.conv_id, _prompt(5 + 7 * i, 10 + i))
  second = engine.generate_turn([r.conv_id for r in first], params,
                                jax.random.key(1))
  conversations = [engine.tokens(r.conv_id) for r in second]
  for r in second:
    engine.release(r.conv_id)
  return list(zip(first + second, conversations * 2))


@pytest.mark.slow  # 11 programs and an open engine's (~20 s); the strict
# run of compiled_test.py drives closed engines in the default run.
def test_a_closed_engine_runs_only_its_precompiled_programs_and_agrees():
  closed = _engine(Shapes(4, 96, 32, 16, **CLOSED), strict=True)
  count, seconds = closed.precompile(stop_ids=1)
  assert count == closed.shapes.count() and seconds > 0
  traces = dict(closed.trace_counts)
  params = SamplingParams(temperature=0.0, max_new_tokens=10,
                          stop_token_ids=(3,))
  got = _turns(closed, params)
  assert closed.trace_counts == traces  # Nothing compiled after start-up.
  want = _turns(_engine(), params)  # Open shapes.
  for (g, tokens), (w, _) in zip(got, want):
    assert g.tokens == w.tokens
    np.testing.assert_allclose(g.logprobs, w.logprobs,
                               **logprob_tolerance(_model(), [tokens]))


def test_a_strict_engine_refuses_a_shape_outside_its_set():
  engine = _engine(Shapes(4, 96, 32, 16, **CLOSED), strict=True)
  engine.precompile(stop_ids=1)
  many_stops = SamplingParams(temperature=0.0, max_new_tokens=4,
                              stop_token_ids=tuple(range(9)))  # Pads to 16.
  with pytest.raises(ShapeError, match=r"program 'prefill': .*\(16,\).* "
                     "outside the .* compiled at start-up"):
    engine.generate([_prompt(5, 0)], many_stops, jax.random.key(0))


def test_the_engine_refuses_shapes_of_another_engine():
  with pytest.raises(ValueError, match=r"Engine shapes: \(max_rows, "
                     r"cache_len, min_window, min_prompt\) \(8, 96, 32, 16\); "
                     r"expected the engine's \(4, 96, 32, 16\)"):
    _engine(Shapes(8, 96, 32, 16))


def _placed_engine(shape, shapes=None, strict=False):
  """The engine of `_engine` over the model placed on a mesh of the
  first devices (`shape`: axis sizes, as config.mesh.<agent>.shape)."""
  import ml_collections
  from flax import nnx
  from mgrpo_jax.models import sharding
  from mgrpo_jax.runtime import meshes
  mesh = meshes.agent_meshes(ml_collections.ConfigDict({
      "share": True, "main": meshes.agent_config(
          int(np.prod(list(shape.values()))),
          ",".join(f"{k}:{v}" for k, v in shape.items()))}))["main"]
  graphdef, state = nnx.split(_model())
  model = nnx.merge(graphdef, sharding.place_state(state, mesh))
  return Engine(model, max_conversations=4, cache_len=96, chunk_steps=4,
                min_window=32, min_prompt_bucket=16, shapes=shapes,
                strict_shapes=strict), mesh


@pytest.mark.parametrize("shape", [
    # Each about 15 s: the data-parallel mesh in the slow run.
    pytest.param({"fsdp": 2}, marks=pytest.mark.slow, id="fsdp2"),
    pytest.param({"fsdp": 2, "tp": 2}, id="fsdp2_tp2")])
def test_a_closed_engine_on_several_devices_runs_its_set_and_agrees(shape):
  """The cache lives on the weights' devices, heads split over tp as the
  sharding table says, and stays so through prefill, copy and decode: every
  program compiled at start-up runs (strict), and the tokens are the
  one-device open engine's."""
  from jax.sharding import NamedSharding, PartitionSpec
  engine, mesh = _placed_engine(shape, Shapes(4, 96, 32, 16, **CLOSED),
                                strict=True)
  want = NamedSharding(mesh, PartitionSpec(None, None, "tp" if "tp" in shape
                                           else None))
  for cache in (engine._cache.k, engine._cache.v):
    assert cache.sharding.is_equivalent_to(want, 5)
  engine.precompile(stop_ids=1)
  traces = dict(engine.trace_counts)
  params = SamplingParams(temperature=0.0, max_new_tokens=10,
                          stop_token_ids=(3,))
  got = _turns(engine, params)
  assert engine.trace_counts == traces  # Nothing compiled after start-up.
  assert engine._cache.k.sharding.is_equivalent_to(want, 5)
  want = _turns(_engine(), params)  # One device, open shapes.
  for (g, tokens), (w, _) in zip(got, want):
    assert g.tokens == w.tokens
    np.testing.assert_allclose(g.logprobs, w.logprobs,
                               **logprob_tolerance(_model(), [tokens]))
