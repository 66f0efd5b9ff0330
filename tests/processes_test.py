"""runtime/processes.py: in one process every call returns at once; in
several (JAX distributed over localhost, tests/processes_worker.py) process
0's decisions reach every process, disagreements are named, and a process
that dies is named by the others within the barrier's timeout."""

import json
import sys
import time

import pytest

from mgrpo_jax.runtime import processes
from processes_test_utils import child_env, run_processes
from trainer_test_utils import ROOT

WORKER = str(ROOT / "tests" / "processes_worker.py")


def test_one_process_returns_at_once():
  assert processes.count() == 1 and processes.primary()
  processes.barrier("one")
  assert processes.broadcast("resume", {"step": 3}) == {"step": 3}
  assert processes.agree("fingerprint", [1, 2]) == [1, 2]
  assert processes.gather("rows", 7) == [7]


def _run(tmp_path, count: int, mode: str):
  results = run_processes(lambda i, coordinator: [
      sys.executable, WORKER, coordinator, str(count), str(i), str(tmp_path),
      mode], count, child_env(), tmp_path, timeout_s=120)
  got = {}
  for i, (code, output) in enumerate(results):
    path = tmp_path / f"process_{i}.json"
    got[i] = (code, json.loads(path.read_text()) if path.exists() else None,
              output)
  return got


def test_processes_share_decisions_and_name_disagreements(tmp_path):
  got = _run(tmp_path, 2, "agree")
  for i, (code, result, output) in got.items():
    assert code == 0, f"process {i}:\n{output[-3000:]}"
    assert result["primary"] == (i == 0) and result["count"] == 2
    assert result["resume"] == 100  # Process 0's value, everywhere.
    # A name called in a loop: the n-th call meets the n-th.
    assert result["polls"] == [[n, 0] for n in range(3)]
    assert result["agreed"] == {"seed": 0, "b": [1, 2]}
    assert result["gathered"] == [3, 13]
    assert result["mismatch"] == (
        "the role's processes disagree on store root: process 0: "
        "\"/tmp/store0\"; process 1: \"/tmp/store1\". Every process of a "
        "role must run the same command (config, flags, store).")


@pytest.mark.slow
def test_a_dead_process_is_named_within_the_timeout(tmp_path):
  """Process 2 of 3 exits before a barrier; the other two stop after the
  barrier's 5 s naming it (not after JAX's heartbeat timeout, 100 s)."""
  start = time.perf_counter()
  got = _run(tmp_path, 3, "die")
  assert time.perf_counter() - start < 60
  assert got[2][0] == 3 and got[2][1] is None
  for i in (0, 1):
    code, result, output = got[i]
    assert code == 1, output[-3000:]
    assert result["barrier"] == (
        f"process {i} of 3: waited 5 s at barrier 'step_done'; process(es) "
        "[2] never came. The role stops here; everything up to the last "
        "finished step is saved, so starting every process again resumes.")
