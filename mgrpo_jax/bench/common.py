"""What every benchmark reports about where it ran."""

from __future__ import annotations

import json
import os
import pathlib
import platform
import sys
from typing import Any, Sequence


def cpu_model(cpuinfo: str | None = None) -> str:
  """The CPU's model name, family / model numbers and widest vector unit
  (e.g. "AMD EPYC (family 26 model 2, AVX-512)"), from /proc/cpuinfo (or
  `cpuinfo`, its text) where it exists, else what `platform` knows. Cloud
  machines often name only "AMD EPYC", which covers CPUs of very different
  speeds."""
  try:
    text = (pathlib.Path("/proc/cpuinfo").read_text() if cpuinfo is None
            else cpuinfo)
  except OSError:
    text = ""
  fields = {}
  for line in text.splitlines():
    key, _, value = line.partition(":")
    fields.setdefault(key.strip(), value.strip())
  if "model name" not in fields:
    return platform.processor() or platform.machine()
  flags = set(fields.get("flags", "").split())
  unit = ("AMX" if "amx_tile" in flags else "AVX-512" if "avx512f" in flags
          else "AVX2" if "avx2" in flags else "")
  about = [f"family {fields['cpu family']} model {fields['model']}"
           if "cpu family" in fields and "model" in fields else "", unit]
  about = ", ".join(a for a in about if a)
  return fields["model name"] + (f" ({about})" if about else "")


def machine() -> str:
  """CPU model, CPU count and OS of this machine, for benchmark tables, and
  glibc malloc's tunables where set (launch/env.sh asks for huge pages,
  which moves the train step by ~10%)."""
  tunables = os.environ.get("GLIBC_TUNABLES", "")
  return (f"{cpu_model()}, {os.cpu_count()} CPUs, {platform.system()}"
          + (f", GLIBC_TUNABLES={tunables}" if tunables else ""))


def command_line(name: str, argv: Sequence[str] | None) -> str:
  """`python -m mgrpo_jax.bench.<name> ARGS` as it was run (argv None: the
  process's own arguments), for a results file's header."""
  args = list(sys.argv[1:] if argv is None else argv)
  return " ".join(["python -m", f"mgrpo_jax.bench.{name}", *args])


def write_output(path: str, content: Any) -> None:
  """Writes `content` (a string as it is, anything else as indented JSON)
  to `path`, making its folder, and says so; nothing when `path` is ''."""
  if not path:
    return
  out = pathlib.Path(path)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(content if isinstance(content, str)
                 else json.dumps(content, indent=1))
  print(f"wrote {out}")
