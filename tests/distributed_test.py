"""One role over several processes (runtime/distributed.py): two CPU
processes on localhost join one JAX distributed system (gloo collectives),
train a tiny model on one mesh over both, and match one process; meshes no
process can build, and bad --distributed flags, are refused by name."""

import json
import subprocess
import sys

import numpy as np
import pytest

import distributed_worker as worker
from mgrpo_jax.runtime import distributed
from mgrpo_jax.runtime.config_checks import ConfigError
from processes_test_utils import TIMEOUT_S, child_env, run_pair
from trainer_test_utils import CHILD_CONFIG, ROOT, tiny_config

@pytest.mark.slow  # 20 s; launch_test keeps two processes in the default run.
def test_two_processes_train_one_mesh_as_one_process_does(tmp_path):
  """The learner on a mesh of 2 devices, one in each process, gives the
  figures and weights of the same learner on 2 devices of one process
  (bit for bit in our runs: the cross-process sum adds the same two
  numbers as the in-process one). Both run as fresh processes: the
  reference computed inside pytest (8 CPU devices, other XLA settings)
  differed by float32 noise in Adam's near-zero updates (1e-6)."""
  worker_py = str(ROOT / "tests" / "distributed_worker.py")
  results = run_pair(lambda i, coordinator: [
      sys.executable, worker_py, coordinator, "2", str(i), str(tmp_path)],
      child_env(), tmp_path)
  for i, (code, output) in enumerate(results):
    assert code == 0, f"process {i}:\n{output[-3000:]}"
  got = [json.loads((tmp_path / f"process_{i}.json").read_text())
         for i in range(2)]
  for i, result in enumerate(got):
    assert result["describe"] == (f"process {i} of 2: 1 of 2 devices local "
                                  "(cpu)")
    assert result["mesh_processes"] == [0, 1]
    assert result["mesh_shape"] == {"fsdp": 2, "tp": 1}
    # Meshes no process may build are refused, naming the processes.
    assert result["too_many"].startswith(
        "config.mesh.main.devices=3: expected at most 2, but only 2 "
        "device(s) exist across the 2 processes of this role's "
        "jax.distributed system")
    assert result["one_process"].startswith(
        "config.mesh.main: its mesh's devices [0] belong to process(es) [0] "
        "only; expected devices of every process")
    assert "process(es) [1] hold none of them" in result["one_process"]
  assert got[0]["figures"] == got[1]["figures"]

  one = subprocess.run([sys.executable, worker_py, "one", "2",
                        str(tmp_path)], cwd=ROOT, env=child_env(),
                       capture_output=True, text=True, timeout=TIMEOUT_S)
  assert one.returncode == 0, one.stderr[-3000:]
  figures = json.loads((tmp_path / "one.json").read_text())["figures"]
  assert len(figures) == worker.STEPS
  for step, (two, want) in enumerate(zip(got[0]["figures"], figures)):
    assert two.keys() == want.keys()
    for key in want:
      assert two[key] == pytest.approx(want[key], rel=1e-6, abs=1e-7), (
          step, key)
  want = np.load(tmp_path / "one.npz")
  saved = np.load(tmp_path / "params.npz")
  assert sorted(saved.files) == sorted(want.files)
  for name in want.files:
    np.testing.assert_allclose(saved[name], want[name], rtol=1e-6,
                               atol=1e-7, err_msg=name)
  assert figures[0]["grad_norm"] > 0


MAIN_REFUSALS = [  # (role and --config overrides, stderr line)
    (["--role=sub", "--config.mesh.sub.devices=4"],
     "error: config.mesh.sub.devices=4: expected at most 2, but only 2 "
     "device(s) exist across the 2 processes of this role's jax.distributed "
     "system"),
    (["--role=main", "--config.mesh.main.devices=2",
      "--config.mesh.sub.devices=2", "--config.train.rollout_shards=3"],
     "error: config.train.rollout_shards=3: expected a multiple of the "
     "main role's 2 processes"),
]


@pytest.mark.parametrize("overrides,line", MAIN_REFUSALS,
                         ids=["more_devices_than_the_processes",
                              "shards_the_processes_cannot_split"])
def test_main_joins_the_processes_then_refuses_by_name(overrides, line,
                                                       tmp_path):
  """`python -m mgrpo_jax.main --distributed=explicit ...` in two
  processes: both join (one line each), then stop with exit 2 and one
  error line before anything is written."""
  config_file = tmp_path / "config.py"
  config_file.write_text(CHILD_CONFIG.format(
      text=tiny_config(tmp_path).to_json()))
  results = run_pair(lambda i, coordinator: [
      sys.executable, "-m", "mgrpo_jax.main", "--config", str(config_file),
      "--distributed=explicit",
      f"--coordinator_address={coordinator}", "--num_processes=2",
      f"--process_id={i}", *overrides],
      child_env(MGRPO_JAX_CACHE=str(tmp_path / "cache")), tmp_path)
  for i, (code, output) in enumerate(results):
    assert code == 2, f"process {i}:\n{output[-3000:]}"
    assert (f"jax.distributed: process {i} of 2: 1 of 2 devices local (cpu)"
            in output), output[-3000:]
    assert line.format(i=i) in output, output[-3000:]
    assert "Traceback" not in output
  assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("flags,line", [
    (["--distributed=explicit", "--num_processes=2"],
     "error: --distributed=explicit needs --coordinator_address, "
     "--process_id"),
    (["--process_id=1"], "error: --process_id given with --distributed=off: "
     "these are read only with --distributed=explicit"),
    (["--distributed=explicit", "--coordinator_address=10.0.0.2",
      "--num_processes=2", "--process_id=0"],
     "error: --coordinator_address='10.0.0.2': expected host:port"),
    (["--distributed=explicit", "--coordinator_address=h:1",
      "--num_processes=2", "--process_id=2"],
     "error: --process_id=2: expected an integer in 0 .. 1"),
    (["--distributed=everywhere"], "error: flag --distributed=everywhere: "),
])
def test_bad_distributed_flags_are_one_line_exit_2(flags, line):
  result = subprocess.run(
      [sys.executable, "-m", "mgrpo_jax.main", "--config", "configs/toy.py",
       *flags], cwd=ROOT, env=child_env(), capture_output=True, text=True,
      timeout=TIMEOUT_S)
  assert result.returncode == 2, result.stderr[-2000:]
  assert line in result.stderr
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_coordinator_that_never_answers_is_one_line_within_the_timeout():
  """Process 1 of 2 with nobody at the coordinator's address: one line
  naming the flag, exit 1, after --distributed_timeout_s (not JAX's abort
  after 300 s)."""
  import time  # pylint: disable=g-import-not-at-top
  from processes_test_utils import free_port  # pylint: disable=g-import-not-at-top
  address = f"127.0.0.1:{free_port()}"
  start = time.monotonic()
  result = subprocess.run(
      [sys.executable, "-m", "mgrpo_jax.main", "--config", "configs/toy.py",
       "--distributed=explicit", f"--coordinator_address={address}",
       "--num_processes=2", "--process_id=1", "--distributed_timeout_s=2"],
      cwd=ROOT, env=child_env(), capture_output=True, text=True,
      timeout=TIMEOUT_S)
  assert result.returncode == 1, result.stderr[-2000:]
  assert result.stderr.startswith(
      f"stopped: --coordinator_address={address}: no coordinator answered "
      "within 2 s"), result.stderr
  assert len(result.stderr.strip().splitlines()) == 1, result.stderr
  assert time.monotonic() - start < 60


def test_off_is_nothing_and_checks_come_first():
  assert distributed.initialize("off") is False
  with pytest.raises(ConfigError, match=r"--num_processes=0: expected an "
                     r"integer >= 1"):
    distributed.check_args("explicit", "h:1", 0, 0)
  with pytest.raises(ConfigError, match="--distributed='mpi': expected one "
                     "of"):
    distributed.check_args("mpi", None, None, None)
  distributed.check_args("auto", None, None, None)


def test_importing_the_entry_points_starts_no_jax_backend():
  """jax.distributed.initialize must come before JAX's backend starts, so
  importing main (the config checks, the trainer) must not start it (bm25s
  runs a JAX computation when imported: data/corpus.py imports it late)."""
  code = ("import mgrpo_jax.main, mgrpo_jax.train.trainer\n"
          "from jax._src import xla_bridge\n"
          "print(xla_bridge.backends_are_initialized())")
  result = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                          env=child_env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S)
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.strip() == "False"


class _Device:
  """What meshes.agent_meshes reads of a device: its id and process."""

  def __init__(self, id_, process_index):
    self.id, self.process_index = id_, process_index


@pytest.mark.parametrize("sections,line", [
    ({"share": False, "main": 2, "sub": 2},  # --role=all, disjoint slices.
     "config.mesh.main: its mesh's devices [0, 1] belong to process(es) [0] "
     "only; expected devices of every process of this role's "
     "jax.distributed system (devices per process: 0: 2, 1: 2), but "
     "process(es) [1] hold none of them"),
    ({"share": True, "main": 4, "sub": 1},
     "config.mesh.sub: its mesh's devices [0] belong to process(es) [0] only"),
    ({"share": False, "main": 4, "sub": 4},
     "config.mesh: main.devices=4 + sub.devices=4 requests 8 devices in all: "
     "expected at most 4 for disjoint agent meshes, but only 4 device(s) "
     "exist across the 2 processes"),
])
def test_meshes_that_leave_out_a_process_are_refused(sections, line):
  """Two processes with two devices each (as jax.devices() lists them
  after jax.distributed.initialize), without starting them."""
  import ml_collections
  from mgrpo_jax.runtime import meshes
  devices = [_Device(i, i // 2) for i in range(4)]
  config = ml_collections.ConfigDict({"share": sections.pop("share"), **{
      name: meshes.agent_config(count) for name, count in sections.items()}})
  with pytest.raises(ConfigError) as error:
    meshes.agent_meshes(config, devices)
  assert str(error.value).startswith(line), str(error.value)
