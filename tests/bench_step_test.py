"""One M-GRPO step split by phase: a real (tiny) run's step records."""

import math

import pytest
from trainer_test_utils import tiny_config

from mgrpo_jax.bench import step


@pytest.mark.slow  # 30 s of a benchmark's own run.
def test_a_tiny_run_is_split_into_phases_that_add_up(tmp_path):
  out = step.measure(tiny_config(tmp_path), steps=3, warmup=0)
  phases = out["phases"]
  assert {"rollout", "main learner", "sub learner", "store write",
          "sub align + advantages + pack", "other"} <= set(phases)
  assert all(seconds >= 0 for seconds in phases.values())
  assert phases["rollout"] > 0 and phases["main learner"] > 0
  assert sum(phases.values()) == pytest.approx(out["step_seconds"],
                                               rel=1e-6)
  assert 0 < out["overhead_share"] < 1 and out["timed_steps"] == 2
  assert math.isfinite(out["compilations_per_100_steps"])
  assert 0 <= out["cache_loads_per_100_steps"] <= out[
      "compilations_per_100_steps"]
  assert out["memory"]["host_rss_mib"] > 100
  assert "step |" in step.table({**out, "config": "tiny", "machine": "m",
                                 "warmup": 0})


@pytest.mark.parametrize("steps, warmup", [(3, 2), (1, 0), (4, -1)])
def test_too_few_steps_to_time_are_refused_before_running(steps, warmup):
  with pytest.raises(ValueError, match=r"expected warmup >= 0 and steps >= "
                     r"warmup \+ 2"):
    step.measure(None, steps=steps, warmup=warmup)


def _record(step, compilations, loads=None):
  r = {"step": step, "time/step": 1.0, "time/rollout": 0.5,
       "time/main_update": 0.4, "time/main_batch": 0.1,
       "jit/compilations": float(compilations)}
  if loads is not None:
    r["jit/cache_loads"] = float(loads)
  return r


def test_compilations_and_cache_loads_are_counted_from_the_warmup_on():
  # Steps 2..5 are the window (warm-up 2, step 6 evaluates): 3 programs
  # over 3 steps, 2 of them cache loads -> 100 and ~66.7 per 100 steps.
  records = [_record(1, 50, 10), _record(2, 60, 12), _record(3, 61, 13),
             _record(4, 61, 13), _record(5, 63, 14), _record(6, 70, 14)]
  out = step.split(records, (), warmup=2)
  assert out["compilations_per_100_steps"] == pytest.approx(100.0)
  assert out["cache_loads_per_100_steps"] == pytest.approx(200.0 / 3)
  # Records written before jit/cache_loads existed count no loads.
  old = [{k: v for k, v in r.items() if k != "jit/cache_loads"}
         for r in records]
  assert step.split(old, (), warmup=2)["cache_loads_per_100_steps"] == 0


def test_compilations_after_the_first_step_and_start_up_figures():
  records = [_record(1, 50, 10), _record(2, 52, 10), _record(3, 52, 10),
             _record(4, 52, 10), _record(5, 60, 10)]
  records[0].update({"startup/programs": 30.0, "startup/compile_seconds": 9.0,
                     "startup/programs/main_sampler": 15.0})
  out = step.split(records, (), warmup=1)
  # Steps 1..4 (step 5 evaluates): 2 programs after the first step.
  assert out["compilations_after_first_step"] == 2
  assert out["startup"] == {"programs": 30.0, "compile_seconds": 9.0,
                            "programs/main_sampler": 15.0}
