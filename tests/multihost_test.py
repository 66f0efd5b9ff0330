"""One role over several processes, as on the hosts of a TPU slice: two CPU
processes with two devices each join one JAX distributed system (gloo) and
run `python -m mgrpo_jax.main` on a 4-device mesh per agent; the same run
in one process with 4 devices is the reference. Each process rolls out its
own shard of the step's questions (train/shards.py), samples on one device
of its own (`mesh.<agent>.sampler_devices=1`, the reference too: the
same sampler arithmetic on both sides), and the learners meet in
collectives.

What "the same run" means: the same questions, keys and sampled tokens
(rewards, accuracies, generated tokens and the warm start's checksum equal
exactly), and after an update the same weights to float32 rounding: the
gradient's sum across the 4 devices is added in another order by the
cross-process all-reduce (gloo) than within one process, so the weights'
bit patterns (their checksums) may differ in the last bits and the other
figures agree to 1e-5 (the learner-sampler log-prob gap, float32 noise
itself, to 1e-5 absolute). A run resumed after a SIGKILL matches the
uninterrupted run of the same processes bit for bit. Minutes each:
`bash launch/test_slow.sh`."""

import json
import pathlib
import re
import subprocess
import sys

import pytest
from flax import nnx

from mgrpo_jax.runtime.metrics import MetricsWriter
from processes_test_utils import TIMEOUT_S, child_env, run_processes
from trainer_test_utils import (CHILD_CONFIG, ROOT, assert_same_figures,
                                by_step, small_closed_set, tiny_config)

pytestmark = pytest.mark.slow


def _config(tmp_path: pathlib.Path, name: str, *, shapes: str = "open",
            sampler_devices: int = 1, file: str | None = None, **train):
  """The tiny team on a 4-device mesh per agent; `shapes` "closed": the
  default shapes, a small strict set; `sampler_devices` 0: each process
  samples on all of its devices of the mesh (4 in one process, 2 in each
  of two); `file`: the config file's name (default `name`)."""
  config = tiny_config(tmp_path / name, rollout_shards=2, **train)
  # A warm start that plays the protocol at times: rewards differ within
  # groups, so both learners update (19 s of SFT on this CPU).
  config.sft.steps = 300
  config.mesh.share = True
  for agent in ("main", "sub"):
    config.mesh[agent].devices = 4
    config.mesh[agent].sampler_devices = sampler_devices
  if shapes == "closed":
    small_closed_set(config)
  path = tmp_path / f"{file or name}.py"
  path.write_text(CHILD_CONFIG.format(text=config.to_json()))
  return config, path


EXACT = ("main/reward", "main/accuracy", "main/format", "sub/reward",
         "sub/calls_per_rollout", "rollout/generated_tokens",
         "eval/accuracy", "test/accuracy")


def _assert_same_run(want: dict, got: dict) -> None:
  """The figures of one run (by step) in another layout: see the module
  docstring."""
  for step, figures in want.items():
    for key, value in figures.items():
      # The sampler's sub-agent weights of step 1 are the warm start's;
      # later ones (and the published ones) come from an update.
      warm = step == 1 and key == "weights/sub_checksum"
      if key == "sft/cached" or key.startswith("startup/") or (
          key.endswith("_checksum") and not warm):
        continue  # (A process's start-up figures join its first step.)
      assert key in got[step], (step, key)
      if key in EXACT or warm:
        assert got[step][key] == value, (step, key, got[step][key], value)
      elif key.endswith("logp_gap_max"):
        assert got[step][key] == pytest.approx(value, abs=1e-5), (step, key)
      else:
        assert got[step][key] == pytest.approx(value, rel=1e-5, abs=1e-7), (
            step, key, got[step][key], value)


def _env(tmp_path, devices: int) -> dict[str, str]:
  return child_env(
      XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
      MGRPO_JAX_CACHE=str(tmp_path / "cache"))


def _one(tmp_path, path, *flags) -> None:
  result = subprocess.run(
      [sys.executable, "-m", "mgrpo_jax.main", "--config", str(path),
       *flags], cwd=ROOT, env=_env(tmp_path, 4), capture_output=True,
      text=True, timeout=TIMEOUT_S)
  assert result.returncode == 0, result.stderr[-3000:]


def _two(tmp_path, path, name, *flags, expect=0, own_caches=False):
  """Two processes of one role to the end; `own_caches`: each its own
  cache folder (as on two hosts), else the test's."""
  log_dir = tmp_path / f"{name}_logs"
  log_dir.mkdir(exist_ok=True)
  cache = lambda i: ([f"MGRPO_JAX_CACHE={tmp_path / f'{name}_cache_{i}'}"]
                     if own_caches else [])
  results = run_processes(lambda i, coordinator: [
      "env", *cache(i),
      sys.executable, "-m", "mgrpo_jax.main", "--config", str(path),
      "--distributed=explicit", f"--coordinator_address={coordinator}",
      "--num_processes=2", f"--process_id={i}", *flags], 2,
      _env(tmp_path, 2), log_dir)
  for i, (code, output) in enumerate(results):
    assert code == expect, f"process {i}:\n{output[-3000:]}"
  return results


@pytest.mark.parametrize("shapes, sampler_devices", [
    # The default shapes, each process sampling on all of its devices (the
    # layout that crashed at its first evaluation on closed shapes).
    ("closed", 0),
    ("open", 1)])
def test_a_role_over_two_processes_trains_as_one_process_does(
    tmp_path, shapes, sampler_devices):
  one, one_path = _config(tmp_path, "one", steps=2, shapes=shapes,
                          sampler_devices=sampler_devices)
  two, two_path = _config(tmp_path, "two", steps=2, shapes=shapes,
                          sampler_devices=sampler_devices)
  _one(tmp_path, one_path)
  # As on two hosts (a cache each): process 0 has the warm start (the one
  # run's: SFT on 2 devices of a process rounds differently from SFT on 4)
  # and shares it through the store; process 1 copies it, never trains.
  import shutil
  shutil.copytree(tmp_path / "cache" / "warm_starts",
                  tmp_path / "two_cache_0" / "warm_starts")
  results = _two(tmp_path, two_path, "two", "--verbosity=1",
                 own_caches=True)
  for i, (_, output) in enumerate(results):
    assert f"jax.distributed: process {i} of 2: 2 of 4 devices local" in output
  samples = r"\1" if sampler_devices == 1 else r"\1, \2"
  for i, (_, output) in enumerate(results):  # Each process's placement
    # (device ids as JAX numbers them: 0, 1 in process 0, 2048, 2049 in 1).
    assert re.search(
        rf"process {i} of 2 \(--role=all\): main on devices \[(\d+), "
        rf"(\d+)\] of 4, samples on \[{samples}\]; sub on devices \[\1, "
        rf"\2\] of 4, samples on \[{samples}\]; rolls out shard\(s\) "
        rf"\[{i}\] of 2 \(questions {i}-{i} of each step\)", output), (
            output[-3000:])
  assert "warm start: reusing" in results[0][1]
  assert "warm start: SFT of a" not in results[1][1]
  assert "process 1: warm start: copied from the store" in results[1][1]
  want = by_step(MetricsWriter.read(pathlib.Path(one.run_dir) / "all"))
  got = by_step(MetricsWriter.read(pathlib.Path(two.run_dir) / "all"))
  assert sorted(got) == sorted(want) == [0, 1, 2]
  for agent in ("main", "sub"):  # Equal figures of real updates.
    assert any(want[step][f"{agent}/skipped_update"] == 0.0
               for step in (1, 2)), agent
  _assert_same_run(want, got)
  assert sorted(want[2]) == sorted(got[2])
  run = pathlib.Path(two.run_dir)
  # One process writes: one metrics file, one record per step, made of
  # each process's part.
  assert sorted(p.name for p in run.iterdir()) == ["all", "checkpoints",
                                                    "store"]
  assert len((run / "all" / "metrics.jsonl").read_text().splitlines()) == (
      len((pathlib.Path(one.run_dir) / "all" / "metrics.jsonl")
          .read_text().splitlines()))
  steps = run / "store" / "steps"
  assert sorted(p.name for p in steps.iterdir()) == ["0000000000",
                                                     "0000000001"]
  for step in ("0000000000", "0000000001"):
    meta = json.loads((steps / step / "meta.json").read_text())
    assert meta["parts"] == 2
    assert sorted(p.name for p in (run / "store" / "parts" / step).iterdir()
                  ) == ["00000", "00001"]
  # One process restores what two saved: the weights the sub side (over
  # two processes) published after its last update.
  from mgrpo_jax.runtime.checksum import checksum as weights_checksum
  from mgrpo_jax.train.trained import load_trained
  sub, _, step = load_trained(run / "checkpoints" / "sub")
  assert step == 2
  assert weights_checksum(nnx.state(sub)) == (
      got[2]["weights/published_checksum"])


def _run(tmp_path, layout: str, path, name: str) -> None:
  """`path`'s run as one process of 4 devices or two of 2."""
  if layout == "one":
    _one(tmp_path, path)
  else:
    _two(tmp_path, path, name)


@pytest.mark.parametrize("first, then", [("one", "two"), ("two", "one")])
def test_a_checkpoint_resumes_on_the_other_layout_with_the_same_next_step(
    tmp_path, first, then):
  """Step 1 in one layout (1 process x 4 devices, or 2 x 2), step 2
  resumed from its checkpoints in the other, on the default (closed)
  shapes: step 2 is the step the first layout makes when it goes on."""
  kw = dict(shapes="closed", sampler_devices=0)
  straight, straight_path = _config(tmp_path, "straight", steps=2, **kw)
  halted, halted_path = _config(tmp_path, "halted", steps=1, **kw)
  _, resumed_path = _config(tmp_path, "halted", steps=2, file="resumed",
                            **kw)
  _run(tmp_path, first, straight_path, "straight")
  _run(tmp_path, first, halted_path, "halted")
  _run(tmp_path, then, resumed_path, "resumed")
  want = by_step(MetricsWriter.read(pathlib.Path(straight.run_dir) / "all"))
  got = by_step(MetricsWriter.read(pathlib.Path(halted.run_dir) / "all"))
  assert sorted(got) == sorted(want) == [0, 1, 2]
  _assert_same_run({2: want[2]}, got)
  assert "startup/programs" in got[2]  # The resumed process's start-up.


def test_a_closed_strict_run_over_two_processes_compiles_every_learner_program_at_start_up(
    tmp_path):
  """runtime.shapes='closed' with strict_shapes: each process's main
  learner compiles for the rows of its own rollout shard, the sub learner
  for the whole batch, before the first step; a shape outside the set
  would stop the run (ShapeError)."""
  config, path = _config(tmp_path, "closed", steps=2)
  small_closed_set(config)
  path.write_text(CHILD_CONFIG.format(text=config.to_json()))
  results = _two(tmp_path, path, "closed", "--verbosity=1")
  output = results[0][1]
  assert re.search(r"start-up: compiled \d+ programs in \d+ s \(.*main "
                   r"learner \d+, sub learner \d+\)", output), output[-3000:]
  assert "compile in the first step" not in output
  got = by_step(MetricsWriter.read(pathlib.Path(config.run_dir) / "all"))
  assert sorted(got) == [0, 1, 2]
  for agent in ("main", "sub"):  # Real updates ran on the closed shapes.
    assert any(got[step][f"{agent}/skipped_update"] == 0.0
               for step in (1, 2)), agent


def _start_two(tmp_path, path, name, *flags):
  """Two processes of one role, started; returns [(Popen, log path)]."""
  from processes_test_utils import free_port
  coordinator = f"127.0.0.1:{free_port()}"
  procs = []
  for i in range(2):
    log = tmp_path / f"{name}_{i}.log"
    with open(log, "w") as out:
      procs.append((subprocess.Popen(
          [sys.executable, "-m", "mgrpo_jax.main", "--config", str(path),
           "--distributed=explicit", f"--coordinator_address={coordinator}",
           "--num_processes=2", f"--process_id={i}", *flags], cwd=ROOT,
          env=_env(tmp_path, 2), stdout=out, stderr=subprocess.STDOUT),
                    log))
  return procs


def _wait_logged(config, step: int, procs, timeout_s: float = TIMEOUT_S):
  import time
  from trainer_test_utils import logged_step
  metrics = pathlib.Path(config.run_dir) / "all" / "metrics.jsonl"
  deadline = time.monotonic() + timeout_s
  while logged_step(metrics) < step:
    for proc, log in procs:
      assert proc.poll() is None, log.read_text()[-3000:]
    assert time.monotonic() < deadline, f"step {step} never logged"
    time.sleep(0.5)


def test_both_processes_killed_after_a_step_resume_exactly(tmp_path):
  import signal
  ref, ref_path = _config(tmp_path, "ref", steps=3)
  _two(tmp_path, ref_path, "ref")
  killed, path = _config(tmp_path, "killed", steps=3)
  procs = _start_two(tmp_path, path, "first")
  try:
    _wait_logged(killed, 1, procs)
  finally:
    for proc, _ in procs:
      proc.send_signal(signal.SIGKILL)
      proc.wait(timeout=60)
  _two(tmp_path, path, "again")
  want = by_step(MetricsWriter.read(pathlib.Path(ref.run_dir) / "all"))
  got = by_step(MetricsWriter.read(pathlib.Path(killed.run_dir) / "all"))
  assert sorted(got) == [0, 1, 2, 3]
  assert_same_figures(want, got)
  for step in (2, 3):  # The very same weights, bit for bit.
    assert got[step]["weights/published_checksum"] == (
        want[step]["weights/published_checksum"])


def test_main_and_sub_roles_each_over_two_processes_meet_in_the_store(
    tmp_path):
  """--role=main on two processes and --role=sub on two others (two
  distributed systems, sharing only the store) train what one process
  with --role=all trains."""
  import threading
  ref, ref_path = _config(tmp_path, "ref", steps=2)
  _one(tmp_path, ref_path)
  roles, path = _config(tmp_path, "roles", steps=2)
  results = {}
  threads = [threading.Thread(target=lambda role=role: results.update(
      {role: _two(tmp_path, path, role, f"--role={role}")}))
             for role in ("main", "sub")]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert sorted(results) == ["main", "sub"]
  want = by_step(MetricsWriter.read(pathlib.Path(ref.run_dir) / "all"))
  run = pathlib.Path(roles.run_dir)
  for role in ("main", "sub"):
    got = by_step(MetricsWriter.read(run / role))
    assert sorted(got) == [0, 1, 2], role
    _assert_same_run({step: {k: v for k, v in want[step].items()
                             if k in figures}
                      for step, figures in got.items()}, got)
    assert "main/loss" in got[2] if role == "main" else "sub/loss" in got[2]


def test_a_process_that_dies_stops_the_other_naming_it(tmp_path):
  """Process 1 is SIGKILLed after step 1 is logged; process 0 stops (no
  hang) within the heartbeat bound, naming process 1 (in our runs it was
  in the step's checkpoint barrier: JAX's heartbeat message), and the
  committed checkpoints stay for a restart."""
  import signal
  import time
  config, path = _config(tmp_path, "dies", steps=4)
  procs = _start_two(tmp_path, path, "dies", "--heartbeat_timeout_s=10")
  try:
    _wait_logged(config, 1, procs)
    procs[1][0].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    code = procs[0][0].wait(timeout=120)
    took = time.monotonic() - killed
  finally:
    for proc, _ in procs:
      if proc.poll() is None:
        proc.kill()
  output = procs[0][1].read_text(errors="replace")
  assert code != 0, output[-3000:]
  assert took < 90, took
  assert ("process(es) [1] stopped answering" in output
          or "Task 1 heartbeat timeout" in output), output[-3000:]
  assert (pathlib.Path(config.run_dir) / "checkpoints" / "main" / "0"
          / "commit_success.txt").is_file()
