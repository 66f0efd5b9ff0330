"""What every benchmark reports about where it ran."""

from __future__ import annotations

import os
import pathlib
import platform


def cpu_model() -> str:
  """The CPU's model name (e.g. "AMD EPYC 7B13"), from /proc/cpuinfo where
  it exists, else what `platform` knows."""
  try:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name"):
        return line.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def machine() -> str:
  """CPU model, CPU count and OS of this machine, for benchmark tables, and
  glibc malloc's tunables where set (launch/env.sh asks for huge pages,
  which moves the train step by ~10%)."""
  tunables = os.environ.get("GLIBC_TUNABLES", "")
  return (f"{cpu_model()}, {os.cpu_count()} CPUs, {platform.system()}"
          + (f", GLIBC_TUNABLES={tunables}" if tunables else ""))
