"""The processes of one role: who writes, where they wait, what they agree on.

A role (`--role=main`, `sub`, `all`) may run as several processes joined in
one JAX distributed system (runtime/distributed.py), e.g. the hosts of a TPU
slice. Their device work meets in collectives; their host-side work (files,
store polls, resume decisions) must be taken once and shared, or every
process writes the same file and two processes can take different branches
and wait for each other forever. This module is that one place:

  primary()            True in process 0, the one process that writes the
                       role's metrics, logs, outcomes, model card and store
                       records (one process: always True);
  barrier(name)        every process of the role reaches `name` before any
                       goes on; a process that never comes is named in the
                       error after `timeout_s`;
  broadcast(name, v)   process 0's JSON value `v`, returned in every process
                       (a decision taken once: the resume step, a store poll's
                       answer);
  gather(name, v)      every process's JSON value `v`, in every process
                       (per-process figures, a length to agree on);
  absent(timeout_s)    after a failure: the processes that do not answer a
                       roll call within `timeout_s` (to name a process that
                       died in the error every survivor prints);
  agree(name, v)       checks that every process holds the same JSON value
                       (the config's fingerprint, the store's root) and
                       returns it; a ProcessMismatch names the processes
                       that differ and their values.

They talk through the distributed system's key-value store and barriers
(the coordination service, host to host, no device collective), so they
work before any array exists and cost a round trip, not a computation. With
one process every call returns at once and touches nothing. Each name must
be used once per run and process: a repeated name (a loop's decision) takes
its own counter, so the n-th call in one process meets the n-th in the
others.
"""

from __future__ import annotations

import collections
import json
from typing import Any

import jax

from mgrpo_jax.runtime.config_checks import ConfigError

DEFAULT_TIMEOUT_S = 600.0  # How long a process waits for the others.

_calls: collections.Counter[str] = collections.Counter()


class ProcessMismatch(ConfigError):
  """Processes of one role hold different values where they must agree."""


class ProcessTimeout(RuntimeError):
  """A process of the role did not reach a barrier or a broadcast in time."""


def count() -> int:
  return jax.process_count()


def index() -> int:
  return jax.process_index()


def primary() -> bool:
  """Whether this process writes what the role writes once."""
  return jax.process_index() == 0


def _client():
  """The distributed system's client (JAX keeps it in its global state;
  Orbax's multi-host utilities read it the same way)."""
  from jax._src import distributed  # pylint: disable=g-import-not-at-top
  client = distributed.global_state.client
  if client is None:
    raise RuntimeError(
        f"{count()} JAX processes but no distributed client: several "
        "processes of a role must join with jax.distributed.initialize "
        "(--distributed=auto or explicit, runtime/distributed.py).")
  return client


def _key(name: str) -> str:
  """A key unique to this call of `name` (the n-th call of a name meets the
  n-th of the other processes)."""
  _calls[name] += 1
  return f"mgrpo_jax/{name}/{_calls[name]}"


def _arrived(client, key: str) -> list[int]:
  """The processes that reached the wait `key` (each marks its arrival)."""
  here = []
  for process in range(count()):
    try:
      client.key_value_try_get(f"{key}/arrived/{process}")
      here.append(process)
    except Exception:  # pylint: disable=broad-except
      pass  # Not found: that process never came.
  return here


def _timeout(what: str, timeout_s: float, missing: list[int] | None
             ) -> ProcessTimeout:
  """The error of a wait that ran out, naming the processes that never
  came (None: the coordinator, process 0, is gone)."""
  who = ("process 0 (the coordinator) is gone" if missing is None else
         f"process(es) {missing} never came")
  return ProcessTimeout(
      f"process {index()} of {count()}: waited {timeout_s:.0f} s at "
      f"{what}; {who}. The role stops here; everything up to the last "
      "finished step is saved, so starting every process again resumes.")


def barrier(name: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
  """Waits until every process of the role reaches the barrier `name`."""
  if count() == 1:
    return
  client, key = _client(), _key(name)
  try:
    client.key_value_set(f"{key}/arrived/{index()}", "1")
    client.wait_at_barrier(key, int(timeout_s * 1000))
  except Exception as e:  # pylint: disable=broad-except
    try:
      missing = [p for p in range(count()) if p not in _arrived(client, key)]
    except Exception:  # pylint: disable=broad-except
      missing = None
    raise _timeout(f"barrier {name!r}", timeout_s, missing) from e


def broadcast(name: str, value: Any = None,
              timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
  """Process 0's `value` (JSON), in every process; the others' `value` is
  ignored."""
  if count() == 1:
    return value
  client, key = _client(), _key(name)
  if primary():
    client.key_value_set(key, json.dumps(value))
    return json.loads(json.dumps(value))  # What the others receive.
  try:
    text = client.blocking_key_value_get(key, int(timeout_s * 1000))
  except Exception as e:  # pylint: disable=broad-except
    raise _timeout(f"process 0's {name!r}", timeout_s, [0]) from e
  return json.loads(text)


def _exchange(name: str, value: Any, timeout_s: float) -> list[str]:
  """Every process's `value` as JSON text, by process index."""
  client, key = _client(), _key(name)
  client.key_value_set(f"{key}/{index()}", json.dumps(value, sort_keys=True))
  texts = []
  for process in range(count()):
    try:
      texts.append(client.blocking_key_value_get(f"{key}/{process}",
                                                 int(timeout_s * 1000)))
    except Exception as e:  # pylint: disable=broad-except
      raise _timeout(f"{name!r} of process {process}", timeout_s,
                     [process]) from e
  return texts


def gather(name: str, value: Any,
           timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Any]:
  """Every process's `value` (JSON), by process index, in every process
  (e.g. each process's figures, or its batch's longest row)."""
  if count() == 1:
    return [value]
  return [json.loads(text) for text in _exchange(name, value, timeout_s)]


def agree(name: str, value: Any, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
  """`value` (JSON) when every process holds the same; a ProcessMismatch
  naming the processes that differ from process 0, and their values,
  otherwise (raised in every process)."""
  if count() == 1:
    return value
  values = dict(enumerate(_exchange(name, value, timeout_s)))
  differ = [p for p, v in values.items() if v != values[0]]
  if differ:
    shown = "; ".join(f"process {p}: {values[p][:200]}" for p in [0, *differ])
    raise ProcessMismatch(
        f"the role's processes disagree on {name}: {shown}. Every process "
        "of a role must run the same command (config, flags, store).")
  return value


ROLL_CALL = "mgrpo_jax/roll_call"  # Answered once, by a failing process.


def absent(timeout_s: float = 30.0, poll_s: float = 0.5) -> list[int] | None:
  """The processes that do not answer a roll call within `timeout_s` (a
  process that died, or one still computing: every survivor of a failure
  answers), [] when all do; None when the coordinator (process 0) is gone.
  Called once per process, when the role is stopping after an error."""
  import time  # pylint: disable=g-import-not-at-top
  if count() == 1:
    return []
  try:
    client = _client()
    client.key_value_set(f"{ROLL_CALL}/arrived/{index()}", "1")
    deadline = time.monotonic() + timeout_s
    while True:
      here = _arrived(client, ROLL_CALL)
      if len(here) == count() or time.monotonic() >= deadline:
        return [p for p in range(count()) if p not in here]
      time.sleep(poll_s)
  except Exception:  # pylint: disable=broad-except
    return None
