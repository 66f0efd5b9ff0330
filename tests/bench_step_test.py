"""One M-GRPO step split by phase: a real (tiny) run's step records."""

import math

import pytest
from trainer_test_utils import tiny_config

from mgrpo_jax.bench import step


def test_a_tiny_run_is_split_into_phases_that_add_up(tmp_path):
  out = step.measure(tiny_config(tmp_path), steps=4, warmup=1)
  phases = out["phases"]
  assert {"rollout", "main learner", "sub learner", "store write",
          "sub align + advantages + pack", "other"} <= set(phases)
  assert all(seconds >= 0 for seconds in phases.values())
  assert phases["rollout"] > 0 and phases["main learner"] > 0
  assert sum(phases.values()) == pytest.approx(out["step_seconds"],
                                               rel=1e-6)
  assert 0 < out["overhead_share"] < 1 and out["timed_steps"] == 2
  assert math.isfinite(out["compilations_per_100_steps"])
  assert out["memory"]["host_rss_mib"] > 100
  assert "step |" in step.table({**out, "config": "tiny", "machine": "m",
                                 "warmup": 1})


@pytest.mark.parametrize("steps, warmup", [(3, 2), (1, 0), (4, -1)])
def test_too_few_steps_to_time_are_refused_before_running(steps, warmup):
  with pytest.raises(ValueError, match=r"expected warmup >= 0 and steps >= "
                     r"warmup \+ 2"):
    step.measure(None, steps=steps, warmup=warmup)
