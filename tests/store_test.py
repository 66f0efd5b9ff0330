"""Tests for runtime/store.py: one conformance test for every backend.

The gs:// backend runs against an in-memory GCS emulator on 127.0.0.1
(tests/gcs_emulator.py); it is skipped when the test extras
(gcp-storage-emulator, gcsfs) are not installed.
"""

import dataclasses
import errno
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import jax
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import gcs_emulator
from mgrpo_jax.runtime import store as store_lib
from mgrpo_jax.runtime import store_files

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
    from mgrpo_jax.runtime import store as store_lib
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


def _overwrite(store, path, data):
  """Replaces one file of `store` behind its back, as a disk fault would."""
  files = store._files
  if isinstance(files, store_files.LocalFiles):
    with open(files.url(path), "wb") as f:
      f.write(data)
  else:
    files._kv.write(path, data).result()


def _delete_tree(store, path):
  """Deletes a directory of `store` (on gs://, every object under it)."""
  files = store._files
  if isinstance(files, store_files.LocalFiles):
    shutil.rmtree(files.url(path))
  else:
    key_range = files._ts.KvStore.KeyRange(f"{path}/", f"{path}0")
    files._kv.delete_range(key_range).result()


def _small_params(version):
  return {"w": np.full(2, version, np.float32)}


@pytest.mark.parametrize("no_link", ["raises", "missing"])
def test_store_works_without_hard_links(tmp_path, monkeypatch, no_link):
  """gcsfuse and other FUSE mounts have no os.link."""
  if no_link == "raises":
    def link(*args):
      raise OSError(errno.EPERM, "Operation not permitted", *args)
    monkeypatch.setattr(os, "link", link)
  else:
    monkeypatch.delattr(os, "link")
  root = str(tmp_path / "store")
  writer = store_lib.open_store(root, fingerprint=FINGERPRINT)
  writer.write_step(0, *_record(0))
  writer.publish_weights("sub", 0, _params(0))
  assert json.loads((tmp_path / "store" / "fingerprint.json").read_text()
                    ) == FINGERPRINT
  reader = store_lib.open_store(root, fingerprint=FINGERPRINT)
  _check_record(reader.read_step(0, timeout_s=5), 0)
  assert reader.latest_weights_step("sub") == 0
  _check_params(reader.load_weights("sub", 0), 0)
  with pytest.raises(store_lib.StoreError, match="K: store has 4"):
    store_lib.open_store(root, fingerprint={**FINGERPRINT, "K": 8})
  # A second creator never overwrites the first's file.
  writer._files.create("fingerprint.json", b"{}")
  assert json.loads((tmp_path / "store" / "fingerprint.json").read_text()
                    ) == FINGERPRINT
  assert not [n for n in os.listdir(root) if n.startswith(".")]
  reader.close()
  writer.close()


def test_create_without_hard_links_waits_for_the_lock_holder(tmp_path,
                                                             monkeypatch):
  monkeypatch.delattr(os, "link")
  files = store_files.LocalFiles(str(tmp_path))
  lock = tmp_path / ".lock-first.json"
  lock.touch()

  def first_creator():
    time.sleep(0.3)
    (tmp_path / "first.json").write_bytes(b"first")
    lock.unlink()
  thread = threading.Thread(target=first_creator)
  thread.start()
  files.create("first.json", b"second")
  thread.join()
  assert (tmp_path / "first.json").read_bytes() == b"first"

  # A lock whose holder died: a StoreError that names it, no hang.
  monkeypatch.setattr(store_files, "LOCK_WAIT_S", 0.2)
  (tmp_path / ".lock-second.json").touch()
  with pytest.raises(store_lib.StoreError, match=r"\.lock-second\.json has"):
    files.create("second.json", b"second")
  assert not (tmp_path / "second.json").exists()


def test_corrupt_records_are_store_errors(backend):
  store = store_lib.open_store(backend.root, fingerprint=FINGERPRINT)
  for step in (0, 1):
    store.write_step(step, *_record(step))
  arrays_path = "steps/0000000000/arrays.npz"
  npz = store._files.read(arrays_path)
  _overwrite(store, arrays_path, npz[:len(npz) // 2])
  _overwrite(store, "steps/0000000001/meta.json", b"{not json")
  with pytest.raises(store_lib.StoreError) as err:
    store.read_step(0, timeout_s=5)
  message = str(err.value)
  assert f"{store.root}/{arrays_path} is corrupt" in message
  assert message.startswith("step 0: ")
  assert "delete the step directory" in message
  with pytest.raises(store_lib.StoreError,
                     match=r"step 1: .*/0000000001/meta\.json is corrupt"):
    store.read_step(1, timeout_s=5)
  # The advice works: once the directory is deleted, the step is written
  # again.
  _delete_tree(store, "steps/0000000000")
  assert not store.has_step(0)
  store.write_step(0, *_record(0))
  _check_record(store.read_step(0, timeout_s=5), 0)
  _overwrite(store, "fingerprint.json", b"\x00garbage")
  with pytest.raises(store_lib.StoreError,
                     match=r"fingerprint\.json is corrupt"):
    store_lib.open_store(backend.root, fingerprint=FINGERPRINT)
  store.close()


def test_fingerprint_is_written_by_the_first_write(backend):
  other = {**FINGERPRINT, "K": 8}
  failed_start = store_lib.open_store(backend.root, fingerprint=FINGERPRINT)
  assert failed_start._files.read("fingerprint.json") is None
  # The corrected command (another config) is accepted, and binds the root
  # once it writes.
  corrected = store_lib.open_store(backend.root, fingerprint=other)
  corrected.write_step(0, *_record(0))
  with pytest.raises(store_lib.StoreError, match="incompatible") as err:
    store_lib.open_store(backend.root, fingerprint=FINGERPRINT)
  assert "K: store has 8, this run has 4" in str(err.value)
  # A Store opened before that write is refused at its own first write.
  with pytest.raises(store_lib.StoreError, match="K: store has 8"):
    failed_start.write_step(1, *_record(1))
  assert not failed_start.has_step(1)
  store_lib.open_store(backend.root, fingerprint=other).close()

  # publish_weights writes it too, before the weights.
  weights_root = f"{backend.root}-weights"
  publisher = store_lib.open_store(weights_root, fingerprint=other)
  publisher.publish_weights("sub", 0, _small_params(0))
  with pytest.raises(store_lib.StoreError, match="K: store has 8"):
    store_lib.open_store(weights_root, fingerprint=FINGERPRINT)
  for store in (failed_start, corrected, publisher):
    store.close()


def test_prune_weights(backend):
  writer = store_lib.open_store(backend.root)  # keep_weights=None.
  for version in range(7):
    writer.publish_weights("sub", version, _small_params(version))
  reader = store_lib.open_store(backend.root)
  np.testing.assert_array_equal(reader.load_weights("sub", 0)["w"],
                                _small_params(0)["w"])
  assert writer.prune_weights("sub", keep_from=4) == [0, 1, 2, 3]
  with pytest.raises(store_lib.StoreError, match=r"available: \[4, 5, 6\]"):
    reader.load_weights("sub", 0)
  assert writer.prune_weights("sub", keep_from=10, keep_newest=2) == [4]
  assert writer.prune_weights("sub", keep_from=10, keep_newest=5) == []
  with pytest.raises(store_lib.StoreError, match=r"available: \[5, 6\]"):
    reader.load_weights("sub", 4)
  assert reader.latest_weights_step("sub") == 6
  for version in (5, 6):
    np.testing.assert_array_equal(reader.load_weights("sub", version)["w"],
                                  _small_params(version)["w"])
  writer.publish_weights("sub", 7, _small_params(7))
  assert reader.latest_weights_step("sub") == 7
  for field, kwargs in (("keep_from=-1", {"keep_from": -1}),
                        ("keep_newest=1.5", {"keep_from": 0,
                                             "keep_newest": 1.5})):
    with pytest.raises(store_lib.StoreError, match=field):
      writer.prune_weights("sub", **kwargs)
  reader.close()
  writer.close()


def _age(path, seconds):
  """Sets `path`'s access and modification times `seconds` in the past."""
  then = time.time() - seconds
  os.utime(path, (then, then))


def test_open_removes_stale_temporaries(tmp_path):
  root = tmp_path / "store"
  store = store_lib.open_store(str(root), fingerprint=FINGERPRINT)
  store.write_step(0, *_record(0))
  store.publish_weights("sub", 0, _small_params(0))
  store.close()
  stale_dir = root / "steps" / ".tmp-0000000001-0123"
  fresh_dir = root / "steps" / ".tmp-0000000002-4567"
  orbax_dir = root / "weights" / "sub" / "1.orbax-checkpoint-tmp"
  for directory in (stale_dir, fresh_dir, orbax_dir):
    directory.mkdir()
    (directory / "arrays.npz").write_bytes(b"half")
  stale_files = [root / ".probe-abc", root / ".lock-fingerprint.json",
                 root / ".tmp-fingerprint.json-0123"]
  for path in stale_files:
    path.write_bytes(b"")
  fresh_probe = root / ".probe-def"  # Another writer's, being written.
  fresh_probe.write_bytes(b"")
  age_s = store_lib.STALE_TEMPORARY_AGE_S + 60
  for path in [stale_dir, orbax_dir, *stale_files]:
    _age(path, age_s)

  store = store_lib.open_store(str(root), fingerprint=FINGERPRINT)
  for path in [stale_dir, orbax_dir, *stale_files]:
    assert not path.exists(), path
  assert fresh_dir.exists() and fresh_probe.exists()
  assert (root / "fingerprint.json").exists()
  assert store.latest_step() == 0 and not store.has_step(2)
  _check_record(store.read_step(0, timeout_s=5), 0)
  assert store.latest_weights_step("sub") == 0
  store.publish_weights("sub", 1, _small_params(1))
  assert store.latest_weights_step("sub") == 1
  store.close()


def test_open_removes_stale_gcs_probes(emulator):
  root = f"gs://{emulator.bucket}/run-{uuid.uuid4().hex[:8]}"
  store = store_lib.open_store(root)
  stale_ns = time.time_ns() - int(
      (store_lib.STALE_TEMPORARY_AGE_S + 60) * 1e9)
  stale, fresh = f".probe-{stale_ns}-0123", f".probe-{time.time_ns()}-4567"
  for key in (stale, fresh):
    _overwrite(store, key, b"probe")
  store_lib.open_store(root).close()
  assert store._files.read(stale) is None
  assert store._files.read(fresh) == b"probe"
  assert store.latest_step() is None
  store.close()


def test_a_step_of_parts_commits_every_process_share_together(backend):
  """A role over several processes: each writes its part, process 0
  commits the step naming how many; a reader gets the parts in order only
  once the step is committed, and a commit with a part missing is refused."""
  store = store_lib.open_store(backend.root, fingerprint=FINGERPRINT)
  first, _ = _record(3)
  second, _ = _record(4)
  store.write_part(3, 1, second)  # Parts arrive in any order.
  assert store.has_part(3, 1) and not store.has_part(3, 0)
  with pytest.raises(store_lib.StoreError, match=r"parts \[0\] of 2"):
    store.write_step(3, {}, {"step": 3}, parts=2)
  assert not store.has_step(3)
  store.write_part(3, 0, first)
  with pytest.raises(store_lib.StoreError, match="part 0 is already written"):
    store.write_part(3, 0, first)
  store.write_step(3, {}, {"step": 3}, parts=2)
  reader = store_lib.open_store(backend.root, fingerprint=FINGERPRINT)
  arrays, meta = reader.read_step(3, timeout_s=5)
  assert arrays == {} and meta == {"step": 3, store_lib.PARTS_KEY: 2}
  parts = reader.read_parts(3, meta)
  for got, want in zip(parts, (first, second), strict=True):
    assert sorted(got) == sorted(want)
    for name in want:
      np.testing.assert_array_equal(got[name], want[name], err_msg=name)
  whole = _record(5)
  store.write_step(5, *whole)
  assert reader.read_parts(5, reader.read_step(5, timeout_s=5)[1]) == []


@pytest.mark.parametrize("call, match", [
    (lambda s: s.write_part(0, -1, {}), "part=-1: expected a non-negative"),
    (lambda s: s.write_part(0, True, {}), "part=True"),
    (lambda s: s.write_step(0, {}, {}, parts=-2), "parts=-2"),
    (lambda s: s.write_step(0, {}, {"parts": 2}), "meta key 'parts'"),
])
def test_bad_parts_are_refused(tmp_path, call, match):
  store = store_lib.open_store(str(tmp_path / "store"))
  with pytest.raises(store_lib.StoreError, match=match):
    call(store)


def test_a_shared_warm_start_is_copied_whole_once(backend, tmp_path):
  """A role over several hosts: process 0 shares the warm start it
  trained, the others copy it into their own caches."""
  store = store_lib.open_store(backend.root, fingerprint=FINGERPRINT)
  trained = tmp_path / "trained"
  trained.mkdir()
  (trained / "model.safetensors").write_bytes(b"\x00\x01weights" * 100)
  (trained / "sft.json").write_text('{"sft/steps": 2}')
  copy = tmp_path / "copy"
  copy.mkdir()
  assert not store.copy_warm_start("abc123", copy)
  store.share_warm_start("abc123", trained)
  (trained / "sft.json").write_text("changed")
  store.share_warm_start("abc123", trained)  # The first is kept.
  reader = store_lib.open_store(backend.root, fingerprint=FINGERPRINT)
  assert reader.copy_warm_start("abc123", copy)
  assert sorted(p.name for p in copy.iterdir()) == ["model.safetensors",
                                                    "sft.json"]
  assert (copy / "sft.json").read_text() == '{"sft/steps": 2}'
  assert (copy / "model.safetensors").read_bytes() == (
      b"\x00\x01weights" * 100)
  with pytest.raises(store_lib.StoreError, match="key='../x'"):
    store.share_warm_start("../x", trained)
