"""Helpers of the tests that start several JAX processes on localhost
(tests/distributed_test.py, processes_test.py, launch_test.py): a free
port for the coordinator, the children's environment, and N processes run
at once with their output kept."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
from typing import Callable, Sequence

from trainer_test_utils import ROOT

TIMEOUT_S = 300  # Each child process; they take seconds to a minute.


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def child_env(**extra) -> dict[str, str]:
  """One CPU device per process (not the 8 of conftest.py)."""
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  return {**env, "JAX_PLATFORMS": "cpu", **extra}


def run_processes(command: Callable[[int, str], Sequence[str]], count: int,
                  env: dict[str, str], log_dir: pathlib.Path,
                  timeout_s: float = TIMEOUT_S) -> list[tuple[int, str]]:
  """`command(process_id, coordinator)` in `count` processes at once;
  returns [(exit code, output)] by process id. A process still running
  after `timeout_s` is killed (exit code None)."""
  coordinator = f"127.0.0.1:{free_port()}"
  procs = []
  for i in range(count):
    log = open(log_dir / f"process_{i}.log", "w")
    procs.append((subprocess.Popen(command(i, coordinator), cwd=ROOT, env=env,
                                   stdout=log, stderr=subprocess.STDOUT),
                  log))
  out = []
  try:
    for i, (proc, log) in enumerate(procs):
      try:
        proc.wait(timeout=timeout_s)
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
      log.close()
      out.append((proc.returncode,
                  (log_dir / f"process_{i}.log").read_text()))
  finally:
    for proc, log in procs:
      if proc.poll() is None:
        proc.kill()
      log.close()
  return out


def run_pair(command, env, log_dir: pathlib.Path):
  """Two processes of `run_processes`."""
  return run_processes(command, 2, env, log_dir)
