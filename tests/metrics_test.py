"""Metrics: JSONL lines, TensorBoard events read back, the progress bar."""

import io
import json
import math

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from mgrpo_jax.runtime.metrics import (JSONL_NAME, METRICS_DOC,
                                        TENSORBOARD_DIR, MetricsWriter,
                                        ProgressBar, read_jsonl)


def scalars(run_dir) -> dict[str, list[tuple[int, float]]]:
  """Every TensorBoard scalar under run_dir/tensorboard, by tag."""
  acc = event_accumulator.EventAccumulator(str(run_dir / TENSORBOARD_DIR))
  acc.Reload()
  return {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
          for tag in acc.Tags()["scalars"]}


def test_lines_and_events_hold_each_step(tmp_path):
  with MetricsWriter(tmp_path) as writer:
    writer.write(1, {"main/reward": 0.5, "time/step": 2.0})
    writer.write(2, {"main/reward": np.float32(0.75), "time/step": 1.5})
  records = MetricsWriter.read(tmp_path)
  assert [r["step"] for r in records] == [1, 2]
  assert [r["main/reward"] for r in records] == [0.5, 0.75]
  assert all(isinstance(r["time"], float) for r in records)
  events = scalars(tmp_path)
  assert events["main/reward"] == [(1, 0.5), (2, 0.75)]
  assert events["time/step"] == [(1, 2.0), (2, 1.5)]


def test_each_line_is_flushed_before_close(tmp_path):
  writer = MetricsWriter(tmp_path, tensorboard=False)
  writer.write(3, {"main/loss": 1.0})
  assert MetricsWriter.read(tmp_path)[0]["main/loss"] == 1.0
  writer.close()
  assert not (tmp_path / TENSORBOARD_DIR).exists()


def test_non_finite_and_non_numeric_values(tmp_path):
  with MetricsWriter(tmp_path) as writer:
    writer.write(1, {"main/kl": float("nan"), "main/loss": np.inf,
                     "phase": "warmup", "counts": [1, 2], "bad": object(),
                     "ok": True, "jax_scalar": np.asarray(3.0)})
  text = (tmp_path / JSONL_NAME).read_text()
  json.loads(text, parse_constant=pytest.fail)  # Strict JSON: no NaN token.
  (record,) = MetricsWriter.read(tmp_path)
  assert record["main/kl"] is None and record["main/loss"] is None
  assert record["phase"] == "warmup" and record["counts"] == [1, 2]
  assert "bad" not in record and record["jax_scalar"] == 3.0
  events = scalars(tmp_path)
  assert math.isnan(events["main/kl"][0][1])
  assert events["main/loss"] == [(1, math.inf)]
  assert events["ok"] == [(1, 1.0)]
  assert "phase" not in events and "counts" not in events


def test_resumed_run_appends_after_a_torn_line(tmp_path):
  with MetricsWriter(tmp_path, tensorboard=False) as writer:
    writer.write(1, {"main/reward": 0.1})
  with open(tmp_path / JSONL_NAME, "a") as f:
    f.write('{"step": 2, "main/rew')  # The crash.
  records, bad = read_jsonl(tmp_path / JSONL_NAME)
  assert [r["step"] for r in records] == [1] and bad == [2]
  with MetricsWriter(tmp_path, tensorboard=False) as writer:
    writer.write(2, {"main/reward": 0.2})
  records, bad = read_jsonl(tmp_path / JSONL_NAME)
  assert [(r["step"], r["main/reward"]) for r in records] == [(1, 0.1),
                                                              (2, 0.2)]
  assert bad == [2]


def test_bad_input_is_named(tmp_path):
  with MetricsWriter(tmp_path, tensorboard=False) as writer:
    with pytest.raises(ValueError, match="step=-1"):
      writer.write(-1, {})
    with pytest.raises(ValueError, match="'time'"):
      writer.write(0, {"time": 1.0})
  with pytest.raises(ValueError, match="closed"):
    writer.write(0, {})
  with pytest.raises(FileNotFoundError, match="nowhere"):
    MetricsWriter.read(tmp_path / "nowhere")


def test_metrics_doc_names_every_logged_metric():
  for prefix in ("main/", "sub/"):
    for name in ("reward", "format", "clip_fraction", "approx_kl", "loss"):
      assert prefix + name in METRICS_DOC
  assert {"main/accuracy", "main/grad_norm", "sub/calls_per_rollout",
          "eval/accuracy", "time/step"} <= set(METRICS_DOC)
  assert all(doc.strip() for doc in METRICS_DOC.values())


def test_progress_lines_every_n_steps_without_a_terminal():
  # ipykernel imported (the notebook tests do) is not a notebook.
  try:
    import ipykernel  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    pass
  out = io.StringIO()
  with ProgressBar(9, start_step=2, log_every=4, file=out) as bar:
    assert bar.mode == "lines"
    for step in range(3, 10):
      bar.update(step, {"main/reward": 0.123456, "other": 1.0})
  lines = out.getvalue().splitlines()
  assert len(lines) == 2  # Step 6 (4 steps after 2) and the last, 9.
  assert "6/9" in lines[0] and "9/9" in lines[1]
  assert "main/reward=0.1235" in lines[0] and "other" not in lines[0]
  assert "\r" not in out.getvalue()


def test_progress_bar_mode_counts_and_shows_metrics():
  out = io.StringIO()
  bar = ProgressBar(5, mode="bar", file=out, keys=("main/reward",))
  bar.update(1, {"main/reward": 0.5})
  bar.update(3)
  assert bar._bar.n == 3
  bar.close()
  assert "3/5" in out.getvalue() and "main/reward=0.5" in out.getvalue()


def test_progress_bar_rejects_bad_settings():
  with pytest.raises(ValueError, match="start_step=6"):
    ProgressBar(5, start_step=6)
  with pytest.raises(ValueError, match="mode='tty'"):
    ProgressBar(5, mode="tty")


def test_persistent_cache_loads_are_counted_apart_from_compilations():
  import jax
  import jax.numpy as jnp
  from mgrpo_jax.runtime import metrics
  metrics.count_compilations()
  before = jax.config.jax_persistent_cache_min_compile_time_secs
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  try:
    # A program no other test compiles (its constant is unusual).
    fn = lambda x: jnp.sin(x) * 1234.56789 + jnp.cos(x) * 9.87654321
    x = jnp.arange(7.0)
    compiled, loads = metrics.compilations(), metrics.cache_loads()
    jax.jit(fn)(x).block_until_ready()  # compiled, written to the cache
    assert metrics.compilations() == compiled + 1
    assert metrics.cache_loads() == loads
    jax.clear_caches()  # the in-memory cache only; the disk keeps it
    jax.jit(fn)(x).block_until_ready()
    assert metrics.compilations() == compiled + 2
    assert metrics.cache_loads() == loads + 1
  finally:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before)


def test_silent_writes_nothing(tmp_path):
  """What a role's processes other than the first hold (trainer.py)."""
  from mgrpo_jax.runtime.metrics import Silent  # pylint: disable=g-import-not-at-top
  silent = Silent()
  silent.write(3, {"main/loss": 1.0})
  silent.update(3, {"main/loss": 1.0})
  silent.close()
  assert not list(tmp_path.iterdir())
