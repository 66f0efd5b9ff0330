"""Tests for training/store.py: one conformance test for every backend.

The gs:// backend runs against an in-memory GCS emulator on 127.0.0.1
(training/gcs_emulator.py); it is skipped when the test extras
(gcp-storage-emulator, gcsfs) are not installed.
"""

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import uuid

import jax
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mgrpo_jax.training import gcs_emulator
from mgrpo_jax.training import store as store_lib

FINGERPRINT = {"main_model": "toy-main", "sub_model": "toy-sub", "B": 2,
               "K": 4, "D_max": 3}
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Backend:
  root: str  # A fresh store root.
  unwritable_root: str  # A root that cannot be created or written.
  env: dict[str, str]  # Environment a second process needs to reach `root`.


@pytest.fixture(scope="module")
def emulator():
  """A GCS emulator for the module, with the env pointing clients at it."""
  for module in ("gcp_storage_emulator", "gcsfs"):
    if importlib.util.find_spec(module) is None:
      pytest.skip(f"{module} is not installed (pip install -e .[test])")
  with gcs_emulator.serve(bucket="mgrpo-test") as em:
    with pytest.MonkeyPatch.context() as mp:
      for key, value in em.env.items():  # Before gcsfs is first imported.
        mp.setenv(key, value)
      yield em


@pytest.fixture(params=["local", "gcs"])
def backend(request, tmp_path):
  if request.param == "local":
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    return Backend(root=str(tmp_path / "store"),
                   unwritable_root=str(a_file / "store"), env={})
  em = request.getfixturevalue("emulator")
  return Backend(root=f"gs://{em.bucket}/run-{uuid.uuid4().hex[:8]}",
                 unwritable_root="gs://no-such-bucket/run", env=em.env)


def _record(step):
  """A step record: ragged sub-agent tokens flattened with offsets."""
  arrays = {
      "tokens": np.arange(10, dtype=np.int32) + step,
      "offsets": np.array([0, 3, 3, 10], np.int64),
      "rewards_BxK": np.full((2, 4), 0.1 * step, np.float32),
      "valid": np.array([True, False]),
      "empty": np.zeros((0, 5), np.float64),
  }
  meta = {"step": step, "stats": {"reward_mean": 0.5}, "names": ["a", "b"]}
  return arrays, meta


def _check_record(got, step):
  arrays, meta = got
  want_arrays, want_meta = _record(step)
  assert sorted(arrays) == sorted(want_arrays)
  for name, want in want_arrays.items():
    assert arrays[name].dtype == want.dtype, name
    np.testing.assert_array_equal(arrays[name], want, err_msg=name)
  assert meta == want_meta


def _params(step):
  """A small pytree of weights: a sharded f32, a bf16 and an int leaf."""
  mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
  w = np.arange(8, dtype=np.float32).reshape(4, 2) + step
  return {
      "w": jax.device_put(w, NamedSharding(mesh, PartitionSpec("x"))),
      "b": np.array([1.5, -2.0, step], ml_dtypes.bfloat16),
      "nested": {"count": np.array(step, np.int32)},
  }


def _check_params(got, step):
  want = _params(step)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    assert g.dtype == w.dtype
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


# A second process, the other side: publishes three weight versions (the
# writer keeps two, so it deletes version 0 and 1), then writes step 2.
_OTHER_SIDE = textwrap.dedent("""
    import sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    import store_test
    from mgrpo_jax.training import store as store_lib
    other = store_lib.open_store({root!r}, fingerprint=store_test.FINGERPRINT,
                                 keep_weights=2)
    for version in (1, 2, 3):
      other.publish_weights("sub", version, store_test._params(version))
    other.write_step(2, *store_test._record(2))
    other.close()
""")


def _start_other_side(backend):
  env = {**os.environ, **backend.env, "JAX_PLATFORMS": "cpu"}
  code = _OTHER_SIDE.format(tests=os.path.join(_REPO, "tests"),
                            root=backend.root)
  return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=_REPO,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)


def test_store_conformance(backend, monkeypatch):
  # An unwritable root fails at open, before anything is written.
  with pytest.raises(store_lib.StoreError, match="not writable"):
    store_lib.open_store(backend.unwritable_root, fingerprint=FINGERPRINT)

  writer = store_lib.open_store(backend.root, fingerprint=FINGERPRINT)
  assert writer.latest_step() is None
  assert writer.latest_weights_step("sub") is None

  # Round trip: arrays (dtypes, shapes, empty ones) and meta.
  writer.write_step(0, *_record(0))
  assert writer.has_step(0) and not writer.has_step(1)
  assert writer.latest_step() == 0
  _check_record(writer.read_step(0), 0)
  with pytest.raises(store_lib.StoreError, match="written once"):
    writer.write_step(0, *_record(0))

  # Fingerprints: same or none opens; a different one names each key.
  reader = store_lib.open_store(backend.root, fingerprint=FINGERPRINT)
  store_lib.open_store(backend.root).close()
  with pytest.raises(store_lib.StoreError, match="incompatible") as err:
    store_lib.open_store(backend.root,
                         fingerprint={**FINGERPRINT, "K": 8, "seed": 1})
  assert "K: store has 4, this run has 8" in str(err.value)
  assert "seed: store has '<absent>', this run has 1" in str(err.value)
  assert "D_max" not in str(err.value)

  # A writer that dies between its data and its commit leaves no step.
  def crash(*args):
    raise RuntimeError("simulated crash")
  with monkeypatch.context() as mp:
    mp.setattr(type(writer._files), "_commit", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
      writer.write_step(1, *_record(1))
  assert not reader.has_step(1) and reader.latest_step() == 0
  messages = []
  with pytest.raises(store_lib.StoreTimeout, match=r"step 1 was not "):
    reader.read_step(1, timeout_s=0.6, poll_s=0.05, status=messages.append,
                     status_every_s=0.2)
  assert messages and "waiting for step 1 " in messages[0]
  writer.write_step(1, *_record(1))  # The restarted writer writes it again.
  _check_record(reader.read_step(1, timeout_s=5), 1)
  assert reader.latest_step() == 1

  # Weights: host arrays without a target, sharded arrays onto a target.
  writer.publish_weights("sub", 0, _params(0))
  assert reader.latest_weights_step("sub") == 0
  _check_params(reader.load_weights("sub", 0), 0)
  mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
  target = jax.tree.map(
      lambda leaf, spec: jax.ShapeDtypeStruct(
          leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec)),
      _params(0), {"w": PartitionSpec("x"), "b": PartitionSpec(),
                   "nested": {"count": PartitionSpec()}})
  loaded = reader.load_weights("sub", 0, target=target)
  _check_params(loaded, 0)
  for got, want in zip(jax.tree.leaves(loaded), jax.tree.leaves(target)):
    assert got.sharding == want.sharding

  # Another process writes: the reader waits for its step, then sees its
  # newest weights although old versions were deleted under it.
  other = _start_other_side(backend)
  try:
    record = reader.read_step(2, timeout_s=120, poll_s=0.1)
  except store_lib.StoreTimeout:
    other.kill()
    pytest.fail("the other side never wrote step 2; its output:\n"
                + other.communicate()[0])
  output, _ = other.communicate(timeout=120)
  assert other.returncode == 0, output
  _check_record(record, 2)
  assert reader.latest_step() == 2
  assert reader.latest_weights_step("sub") == 3
  _check_params(reader.load_weights("sub", 3, target=target), 3)
  with pytest.raises(store_lib.StoreError, match=r"step 0 are not in"):
    reader.load_weights("sub", 0)
  reader.close()
  writer.close()


def test_read_only_dir_is_unwritable(tmp_path):
  if os.geteuid() == 0:
    pytest.skip("root writes into read-only directories")
  tmp_path.chmod(0o555)
  try:
    with pytest.raises(store_lib.StoreError, match="not writable"):
      store_lib.open_store(str(tmp_path))
  finally:
    tmp_path.chmod(0o755)


@pytest.mark.parametrize("arrays, meta, match", [
    ({"x": np.array([object()])}, {}, r"arrays\['x'\].dtype=object"),
    ({"x": np.ones(2, ml_dtypes.bfloat16)}, {}, "bfloat16 to float32"),
    ({3: np.ones(2)}, {}, "arrays key 3"),
    ([np.ones(2)], {}, "arrays: expected a dict"),
    ({}, {"x": object()}, "meta: not JSON-able"),
    ({}, [], "meta: expected a JSON-able dict"),
])
def test_write_step_rejects_bad_records(tmp_path, arrays, meta, match):
  store = store_lib.open_store(str(tmp_path))
  with pytest.raises(store_lib.StoreError, match=match):
    store.write_step(0, arrays, meta)
  assert store.latest_step() is None


def test_bad_arguments_name_the_field(tmp_path):
  store = store_lib.open_store(str(tmp_path))
  with pytest.raises(store_lib.StoreError, match=r"step=-1"):
    store.write_step(-1, {}, {})
  with pytest.raises(store_lib.StoreError, match=r"step=1.5"):
    store.has_step(1.5)
  with pytest.raises(store_lib.StoreError, match=r"poll_s=0"):
    store.read_step(0, poll_s=0)
  with pytest.raises(store_lib.StoreError, match=r"agent='a/b'"):
    store.latest_weights_step("a/b")
  store.publish_weights("sub", 2, {"w": np.ones(2, np.float32)})
  with pytest.raises(store_lib.StoreError, match=r"step=2 is not after"):
    store.publish_weights("sub", 2, {"w": np.ones(2, np.float32)})
  with pytest.raises(store_lib.StoreError, match=r"agent 'sub' at step 1 are"):
    store.load_weights("sub", 1)
  with pytest.raises(store_lib.StoreError, match="keep_weights=0"):
    store_lib.open_store(str(tmp_path), keep_weights=0)
  with pytest.raises(store_lib.StoreError, match="root='s3://b/x'"):
    store_lib.open_store("s3://b/x")
  with pytest.raises(store_lib.StoreError, match="fingerprint: not JSON"):
    store_lib.open_store(str(tmp_path), fingerprint={"x": object()})


def test_record_files_are_plain_npz_and_json(tmp_path):
  """Anyone can inspect a step with numpy and json alone."""
  store = store_lib.open_store(str(tmp_path))
  store.write_step(7, *_record(7))
  step_dir = tmp_path / "steps" / "0000000007"
  with np.load(step_dir / "arrays.npz", allow_pickle=False) as npz:
    np.testing.assert_array_equal(npz["tokens"], _record(7)[0]["tokens"])
  assert json.loads((step_dir / "meta.json").read_text()) == _record(7)[1]
