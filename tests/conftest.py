"""Shared pytest set-up: float32 math, a deterministic hypothesis profile."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from hypothesis import settings  # noqa: E402

# Deterministic (derandomized) so CI runs are repeatable; no deadline because
# the first example of a test pays for JAX compilation.
settings.register_profile("ci", derandomize=True, deadline=None,
                          max_examples=60, print_blob=True)
settings.load_profile("ci")

import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402

# Eight CPU devices, so mesh and sharding tests run on real multi-device
# meshes; it must be set before JAX creates its backend.
jax.config.update("jax_num_cpu_devices", 8)

# Tests compile the same programs more than once (a run, then the same run
# again to check determinism); a per-session persistent cache compiles once.
# Its folder is exported too, so the runs tests start as child processes
# (launch scripts, two-process runs, killed-and-resumed runs, notebooks)
# load what the session compiled instead of compiling it cold
# (enable_compilation_cache lets JAX_COMPILATION_CACHE_DIR win).
_CACHE = tempfile.mkdtemp(prefix="mgrpo_jax_test_xla_cache_")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)

import pytest  # noqa: E402


def pytest_configure(config):
  config.addinivalue_line(
      "markers", "slow: minutes-long end-to-end checks; run with "
      "MGRPO_JAX_SLOW=1 (bash launch/test_slow.sh), not in the default run")


def pytest_collection_modifyitems(config, items):
  if os.environ.get("MGRPO_JAX_SLOW") == "1":
    return
  skip = pytest.mark.skip(reason="slow: set MGRPO_JAX_SLOW=1 (bash "
                          "launch/test_slow.sh) to run it")
  for item in items:
    if "slow" in item.keywords:
      item.add_marker(skip)
