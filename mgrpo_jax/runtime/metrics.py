"""Training metrics: a JSON line per step, TensorBoard scalars, a progress bar.

`MetricsWriter` appends `{"step": ..., "time": ..., **metrics}` to
`RUN_DIR/metrics.jsonl` (one flushed line per call; a resumed run appends to
the same file) and the numeric values as TensorBoard scalars to
`RUN_DIR/tensorboard/` (the `tensorboard` package's event writer, no
TensorFlow). `python -m mgrpo_jax.plot RUN_DIR` draws the curves from the
JSONL file; `tensorboard --logdir RUN_DIR/tensorboard` shows the events.

JSONL values are strict JSON: a non-finite float (NaN, inf) is written as
`null` (TensorBoard gets the float itself), numpy and JAX scalars become
plain numbers, and a value JSON cannot hold is dropped with a warning.

`ProgressBar` shows step / total, ETA and a few metrics: a tqdm bar on a
terminal or in a notebook (Colab, Jupyter), a plain line every `log_every`
steps elsewhere (CI logs), so logs hold no carriage-return noise.
`eval_line` is the one line a run prints per evaluation.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import sys
import time
from typing import Any, Mapping, Sequence, TextIO

from absl import logging
import numpy as np
import tqdm

from mgrpo_jax.runtime import run_files
from mgrpo_jax.runtime.metrics_doc import METRICS_DOC  # noqa: F401  (re-exported)

JSONL_NAME = "metrics.jsonl"  # File under the run directory.
TENSORBOARD_DIR = "tensorboard"  # Event files' folder under the run directory.
RESERVED_FIELDS = ("step", "time")  # Written by MetricsWriter itself.


_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_compilations = {"count": 0, "cache_loads": 0, "listening": False}


def count_compilations() -> None:
  """Starts counting XLA compilations of this process, and which of them
  the persistent cache answered (idempotent)."""
  if _compilations["listening"]:
    return
  import jax  # pylint: disable=g-import-not-at-top

  def listener(event: str, duration: float, **kwargs: Any) -> None:
    del duration, kwargs
    if event == _BACKEND_COMPILE:
      _compilations["count"] += 1

  def hits(event: str, **kwargs: Any) -> None:
    del kwargs
    if event == _CACHE_HIT:
      _compilations["cache_loads"] += 1

  jax.monitoring.register_event_duration_secs_listener(listener)
  jax.monitoring.register_event_listener(hits)
  _compilations["listening"] = True


def compilations() -> int:
  """XLA compilations since `count_compilations()` was first called (the
  persistent cache's loads included)."""
  return _compilations["count"]


def cache_loads() -> int:
  """Of `compilations()`, those the persistent compilation cache answered
  (jax's `/jax/compilation_cache/cache_hits` events)."""
  return _compilations["cache_loads"]


def _to_python(value: Any) -> Any:
  """numpy / JAX scalars -> Python scalars; anything else as it is."""
  if isinstance(value, (bool, int, float, str)) or value is None:
    return value
  if isinstance(value, np.generic) or (
      hasattr(value, "__array__") and np.ndim(value) == 0):
    return np.asarray(value).item()
  return value


def _json_safe(value: Any) -> Any:
  """`value` with every non-finite float replaced by None (recursively)."""
  if isinstance(value, float) and not math.isfinite(value):
    return None
  if isinstance(value, (list, tuple)):
    return [_json_safe(v) for v in value]
  if isinstance(value, dict):
    return {k: _json_safe(v) for k, v in value.items()}
  return value


def _is_scalar_number(value: Any) -> bool:
  return isinstance(value, (bool, int, float))


def read_jsonl(path: str | os.PathLike) -> tuple[list[dict], list[int]]:
  """The records of a metrics file and the 1-based numbers of bad lines.

  A bad line is one that is not a JSON object: the torn tail a crash leaves
  (kept as its own line when a resumed run appends after it). Raises
  FileNotFoundError naming the path when there is no such file.
  """
  text = run_files.read_text(path)
  if text is None:
    raise FileNotFoundError(f"metrics file {str(path)!r} does not exist.")
  records, bad = [], []
  for number, line in enumerate(text.splitlines(keepends=True), start=1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError:
      record = None
    if isinstance(record, dict) and "step" in record:
      records.append(record)
    else:
      bad.append(number)
  return records, bad


class MetricsWriter:
  """Appends one step's metrics to metrics.jsonl and TensorBoard.

  Use as a context manager, or call close(). Writing to the same run
  directory again (a resumed run) appends; nothing is ever truncated.
  """

  def __init__(self, run_dir: str | os.PathLike, *, tensorboard: bool = True):
    # A gs:// run directory (runtime/run_files.py): the file is rewritten
    # whole with each line (an object store cannot append).
    self._remote = run_files.is_remote(run_dir)
    self.run_dir = (run_files.path_of(run_dir) if self._remote
                    else pathlib.Path(run_dir))
    self.run_dir.mkdir(parents=True, exist_ok=True)
    self.path = self.run_dir / JSONL_NAME
    self._text = ""  # A remote file's content.
    self._file: TextIO | None = None
    if self._remote:
      self._text = run_files.read_text(self.path) or ""
      if self._text and not self._text.endswith("\n"):
        self._text += "\n"  # A torn tail: kept, skipped when read.
    else:
      self._terminate_torn_tail()
      self._file = open(self.path, "a", encoding="utf-8")
    self._open = True
    self._dropped: set[str] = set()
    self._events = None
    if tensorboard:
      # Imported here: plotting and reading need no TensorBoard.
      # pylint: disable=g-import-not-at-top
      from tensorboard.summary.writer import event_file_writer
      self._events = event_file_writer.EventFileWriter(
          str(self.run_dir / TENSORBOARD_DIR))

  def _terminate_torn_tail(self) -> None:
    """Ends a crashed run's torn last line, so appended lines stay whole."""
    if not self.path.is_file() or self.path.stat().st_size == 0:
      return
    with open(self.path, "rb+") as f:
      f.seek(-1, os.SEEK_END)
      if f.read(1) != b"\n":
        f.write(b"\n")
        logging.warning("%s ended in a torn line (a crash mid-write?); it is "
                        "kept and skipped when read.", self.path)

  def write(self, step: int, metrics: Mapping[str, Any]) -> None:
    """Appends `metrics` of training step `step` (wall time added)."""
    if not self._open:
      raise ValueError(f"MetricsWriter for {str(self.run_dir)!r} is closed.")
    step = _to_python(step)  # A numpy or JAX integer is fine too.
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
      raise ValueError(f"step={step!r}: expected a non-negative int.")
    now = time.time()
    line: dict[str, Any] = {"step": step, "time": now}
    scalars: dict[str, float] = {}
    for key, raw in metrics.items():
      if not isinstance(key, str) or key in RESERVED_FIELDS:
        raise ValueError(f"metric name {key!r}: expected a str other than "
                         f"{RESERVED_FIELDS}.")
      value = _to_python(raw)
      if _is_scalar_number(value):
        scalars[key] = float(value)
      value = _json_safe(value)
      try:
        json.dumps(value, allow_nan=False)
      except (TypeError, ValueError):
        if key not in self._dropped:
          self._dropped.add(key)
          logging.warning("metric %r: %s value %r is not JSON; not written "
                          "to %s.", key, type(raw).__name__, raw, self.path)
        continue
      line[key] = value
    text = json.dumps(line, allow_nan=False) + "\n"
    if self._remote:
      self._text += text
      self.path.write_text(self._text)
    else:
      self._file.write(text)
      self._file.flush()
    if self._events is not None and scalars:
      self._write_events(step, now, scalars)

  def _write_events(self, step: int, wall_time: float,
                    scalars: Mapping[str, float]) -> None:
    # pylint: disable=g-import-not-at-top
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.proto import summary_pb2
    values = [summary_pb2.Summary.Value(tag=k, simple_value=v)
              for k, v in scalars.items()]
    self._events.add_event(event_pb2.Event(
        wall_time=wall_time, step=step,
        summary=summary_pb2.Summary(value=values)))
    self._events.flush()

  def close(self) -> None:
    self._open = False
    if self._file is not None:
      self._file.close()
      self._file = None
    if self._events is not None:
      self._events.close()
      self._events = None

  def __enter__(self) -> MetricsWriter:
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  @staticmethod
  def read(run_dir: str | os.PathLike) -> list[dict]:
    """Every record of RUN_DIR/metrics.jsonl, in file order.

    Torn lines (a crash mid-write) are skipped with a warning. A resumed run
    may repeat steps; later records are the newer ones.
    """
    path = run_files.path_of(run_dir) / JSONL_NAME
    records, bad = read_jsonl(path)
    if bad:
      logging.warning("%s: skipped torn line(s) %s.", path, bad)
    return records


DEFAULT_BAR_KEYS = ("main/reward", "main/accuracy", "sub/reward",
                    "sub/calls_per_rollout")
# What an evaluation's line shows (the rest is in metrics.jsonl).
EVAL_LINE_KEYS = ("eval/accuracy", "eval/format", "eval/sub_calls",
                  "test/accuracy")


def eval_line(step: int, metrics: Mapping[str, Any]) -> str:
  """One evaluation as one line: "step 5: eval/accuracy=0.4531 ..." with
  the EVAL_LINE_KEYS that `metrics` holds."""
  shown = " ".join(f"{k}={_format_value(metrics[k])}"
                   for k in EVAL_LINE_KEYS if k in metrics)
  return f"step {step}: {shown}"


def _in_notebook() -> bool:
  """Running in a Jupyter / Colab kernel: an IPython shell with a kernel, not
  merely ipykernel imported (a test process that ran a notebook imports it)."""
  get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
  shell = get_ipython() if get_ipython else None
  return "google.colab" in sys.modules or getattr(shell, "kernel",
                                                   None) is not None


def _format_value(value: Any) -> str:
  value = _to_python(value)
  if isinstance(value, float):
    return f"{value:.4g}"
  return str(value)


class Silent:
  """A MetricsWriter and ProgressBar that writes nothing: what the processes
  of a role other than its first (runtime/processes.py) hold, so that one
  process writes the role's metrics and progress."""

  def write(self, step: int, metrics: Mapping[str, Any]) -> None:
    del step, metrics

  def update(self, step: int, metrics: Mapping[str, Any] | None = None
             ) -> None:
    del step, metrics

  def close(self) -> None:
    pass


class ProgressBar:
  """Training progress: step / total, ETA and a few metrics.

  mode: "bar" (tqdm, redrawn in place; the choice on a terminal or in a
  notebook), "lines" (one line every `log_every` steps and at the end; the
  choice when `file` is not a terminal, e.g. CI logs) or "auto".
  """

  def __init__(self, total_steps: int, start_step: int = 0, *,
               keys: Sequence[str] = DEFAULT_BAR_KEYS, log_every: int = 10,
               mode: str = "auto", file: TextIO | None = None,
               desc: str = "train"):
    if total_steps < 0 or not 0 <= start_step <= total_steps:
      raise ValueError(f"start_step={start_step}, total_steps={total_steps}: "
                       "expected 0 <= start_step <= total_steps.")
    if log_every < 1:
      raise ValueError(f"log_every={log_every}: expected >= 1.")
    if mode not in ("auto", "bar", "lines"):
      raise ValueError(f"mode={mode!r}: expected 'auto', 'bar' or 'lines'.")
    self.file = file if file is not None else sys.stderr
    if mode == "auto":
      tty = getattr(self.file, "isatty", lambda: False)()
      mode = "bar" if tty or _in_notebook() else "lines"
    self.mode = mode
    self.total = total_steps
    self.start_step = start_step
    self.step = start_step
    self.keys = tuple(keys)
    self.log_every = log_every
    self.desc = desc
    self._start = time.perf_counter()
    self._postfix = ""
    self._bar = None
    if mode == "bar":
      bar_cls = tqdm.tqdm
      if _in_notebook():
        # pylint: disable=g-import-not-at-top
        from tqdm import auto as tqdm_auto  # Widget bar when ipywidgets is.
        bar_cls = tqdm_auto.tqdm
      self._bar = bar_cls(total=total_steps, initial=start_step, unit="step",
                          desc=desc, file=self.file, dynamic_ncols=True)

  def update(self, step: int, metrics: Mapping[str, Any] | None = None):
    """Marks `step` steps done (absolute count) and shows chosen metrics."""
    if metrics:
      shown = {k: _format_value(metrics[k]) for k in self.keys if k in metrics}
      self._postfix = ", ".join(f"{k}={v}" for k, v in shown.items())
    self.step = step
    if self._bar is not None:
      self._bar.set_postfix_str(self._postfix, refresh=False)
      self._bar.update(step - self._bar.n)
    elif (step - self.start_step) % self.log_every == 0 or step >= self.total:
      self.file.write(self.line() + "\n")
      self.file.flush()

  def line(self) -> str:
    """The progress as one line: step/total, elapsed<ETA, rate, metrics."""
    return tqdm.tqdm.format_meter(
        self.step, self.total, time.perf_counter() - self._start,
        prefix=self.desc, unit="step", initial=self.start_step,
        postfix=self._postfix or None)

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()
      self._bar = None

  def __enter__(self) -> ProgressBar:
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()
