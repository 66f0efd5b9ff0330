"""What a run prints: the project's lines, the libraries' only when asked.

The entry points (`python -m mgrpo_jax.main`, `python -m mgrpo_jax.evaluate`)
call `configure()` once, after absl parsed the flags. Then:
  * project messages (`say`: the world built, the warm start reused or
    trained, one line per evaluation, the final summary) go to stderr as
    they are, one line each, without absl's "I1204 12:00:00.0 file.py:12]"
    prefix; printed with `tqdm.write`, so a progress bar drawn on a terminal
    stays below them;
  * library logs (Orbax's save and rename chatter, tensorflow-datasets', jax's,
    absl INFO lines) are shown only with `--verbosity=1` (absl's flag; its
    levels then apply to every library as usual). Without it, libraries show
    their warnings and errors only, and Orbax and tensorflow-datasets their
    errors only (their warnings are routine: "Using custom data
    configuration", "Given directory is read only").

A training run thus prints one line for the world it built (nothing when
the world is cached), the warm start's progress (or that it reused a cached
one), a progress bar (on a terminal; a plain line every 10 steps
otherwise), one line per evaluation (`step 5: eval/accuracy=...
eval/format=... eval/sub_calls=...`) and a summary (steps, wall time, final
accuracy, where the metrics and checkpoints are); tests/quiet_test.py
counts the 9 lines a tiny run prints.

Imports only the standard library, absl and tqdm (no JAX).
"""

from __future__ import annotations

import logging
import os
import sys

from absl import flags
from absl import logging as absl_logging
import tqdm

PROJECT_LOGGER = "mgrpo_jax"  # Python logger of the project's messages.
VERBOSE = 1  # --verbosity at which library logs are shown.
# Python loggers of libraries that log routine INFO lines (those logging
# through absl use the "absl" logger, which absl's verbosity sets).
LIBRARY_LOGGERS = ("jax", "jaxlib", "orbax", "tensorflow_datasets", "etils",
                   "bm25s")
# Libraries whose warnings are routine too: shown only with --verbosity=1.
ROUTINE_WARNINGS = ("orbax", "tensorflow_datasets")


def say(message: str) -> None:
  """One project message (see the module docstring)."""
  logging.getLogger(PROJECT_LOGGER).info(message)


def detail(message: str) -> None:
  """A project message shown only with --verbosity=1."""
  logging.getLogger(PROJECT_LOGGER).debug(message)


class _BarSafeHandler(logging.Handler):
  """Writes a record's message alone on stderr, above any tqdm bar."""

  def emit(self, record: logging.LogRecord) -> None:
    try:
      tqdm.tqdm.write(self.format(record), file=sys.stderr)
    except Exception:  # pylint: disable=broad-except
      self.handleError(record)


class _RoutineWarnings(logging.Filter):
  """Drops records below ERROR logged from the ROUTINE_WARNINGS packages'
  files (they log through absl's logger, so only the file tells them)."""

  def filter(self, record: logging.LogRecord) -> bool:
    if record.levelno >= logging.ERROR:
      return True
    path = record.pathname or ""
    return not any(f"{os.sep}{name}{os.sep}" in path
                   for name in ROUTINE_WARNINGS)


_HANDLER = _BarSafeHandler()
_FILTER = _RoutineWarnings()


def verbosity() -> int:
  """absl's --verbosity (0 when not given or flags are not parsed yet)."""
  return flags.FLAGS["verbosity"].value if flags.FLAGS.is_parsed() else 0


def configure(level: int | None = None) -> bool:
  """Sets what a run prints (the module docstring) for absl verbosity
  `level` (default: the --verbosity flag). Idempotent. Returns whether the
  libraries' logs are shown (level >= VERBOSE)."""
  level = verbosity() if level is None else level
  verbose = level >= VERBOSE
  project = logging.getLogger(PROJECT_LOGGER)
  project.setLevel(logging.DEBUG if verbose else logging.INFO)
  project.propagate = False  # Not again through absl's handler.
  if _HANDLER not in project.handlers:
    project.addHandler(_HANDLER)
  absl_handler = absl_logging.get_absl_handler()
  if verbose:
    absl_logging.set_verbosity(level)
    absl_handler.removeFilter(_FILTER)
  else:
    absl_logging.set_verbosity(absl_logging.WARNING)
    absl_handler.addFilter(_FILTER)  # Adding twice keeps one.
  for name in LIBRARY_LOGGERS:
    logging.getLogger(name).setLevel(
        logging.NOTSET if verbose else logging.WARNING)
  return verbose
