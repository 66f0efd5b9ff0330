"""mgrpo_jax: M-GRPO (multi-agent GRPO) in JAX.

The core math is importable from the top level:

  from mgrpo_jax import (group_relative_advantages, align_sub_trajectories,
                         clipped_policy_loss, main_reward, sub_reward)

Packages (each one's __init__.py lists its modules): core/ (pure jitted
math), runtime/ (devices, disks, buckets), models/, sampling/, data/,
agents/, train/, toy/ and bench/. The entry points:

  main.py                 python -m mgrpo_jax.main (absl flags +
                          ml_collections config)
  evaluate.py             python -m mgrpo_jax.evaluate
  plot.py                 python -m mgrpo_jax.plot RUN_DIR (PNG curves)
  reproduce.py            python -m mgrpo_jax.reproduce: arms x seeds,
                          resumable
  reproduce_report.py     a reproduction's results JSON, tables and curves
  reproduce_analysis.py   the pre-registered analysis (paired,
                          question-level, diagnostics)
  reproduce_stats.py      t intervals, sign test, McNemar, paired bootstrap
  reproduce_protocol.py   the protocol's design block and the check before
                          a suite
  reproduce_pilot.py      the task pilot (validation split only)
  reproduce_recall.py     the first suite's outcomes split by demonstrated
                          facts (what it measured: recall)

Imports point down only (tests/layout_test.py checks every import): the
entry points and bench/ may import anything; train/ (trainer, side,
learners, SFT, evaluator: the only optimizers) imports agents/ (rollout
controller, team, tools, oracle) and what lies below it; agents/ imports
sampling/, data/, models/, core/ and runtime/; sampling/ imports models/,
core/ and runtime/; models/ imports core/ and runtime/; data/ imports
runtime/; core/ (pure math) and runtime/ (devices, disks, buckets) import
nothing else of the project; toy/ uses core/ and runtime/ only. No module
is over 500 lines.
"""

from mgrpo_jax.core import *  # noqa: F401,F403  (the public core API)
from mgrpo_jax.core import __all__

__version__ = "0.1.0"
