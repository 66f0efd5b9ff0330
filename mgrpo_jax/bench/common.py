"""What every benchmark reports about where it ran."""

from __future__ import annotations

import os
import platform


def machine() -> str:
  """CPU, CPU count and OS of this machine, for benchmark tables."""
  return (f"{platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, {platform.system()}")
