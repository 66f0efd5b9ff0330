"""One process of tests/processes_test.py's runs of runtime/processes.py.

  python tests/processes_worker.py COORDINATOR NUM_PROCESSES PROCESS_ID OUT MODE

joins the JAX distributed system at COORDINATOR and, with MODE "agree",
meets the others at a barrier, receives process 0's broadcasts (one name
called in a loop, too), gathers every process's value, agrees on a value
every process holds and fails to agree on one each holds differently; with MODE "die", the last process
exits without a word and the others wait for it at a barrier with a 5 s
timeout. Writes OUT/process_<id>.json: what each call returned or raised.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys


def main(coordinator: str, processes: str, process_id: str, out: str,
         mode: str) -> None:
  from mgrpo_jax.runtime import distributed, processes as procs  # pylint: disable=g-import-not-at-top
  distributed.initialize("explicit", coordinator, int(processes),
                         int(process_id))
  me = procs.index()
  result = {"primary": procs.primary(), "count": procs.count()}
  if mode == "die":
    if me == procs.count() - 1:
      os._exit(3)  # Gone before the barrier, without a word.
    try:
      procs.barrier("step_done", timeout_s=5)
      result["barrier"] = "passed"
    except procs.ProcessTimeout as e:
      result["barrier"] = str(e)
  else:
    procs.barrier("start")
    result["resume"] = procs.broadcast("resume_step", 100 + me)
    result["polls"] = [procs.broadcast("poll", [n, me]) for n in range(3)]
    result["agreed"] = procs.agree("fingerprint", {"seed": 0, "b": [1, 2]})
    result["gathered"] = procs.gather("longest row", 10 * me + 3)
    try:
      procs.agree("store root", f"/tmp/store{me}")
      result["mismatch"] = None
    except procs.ProcessMismatch as e:
      result["mismatch"] = str(e)
    procs.barrier("end")
  pathlib.Path(out, f"process_{me}.json").write_text(json.dumps(result))
  if mode == "die":  # As mgrpo_jax.main ends a role that lost a process:
    os._exit(1)  # at once, not after JAX's shutdown waits for the dead one.


if __name__ == "__main__":
  main(*sys.argv[1:])
