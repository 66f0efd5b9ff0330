"""The statistics of the reproduction's report (reproduce_report.py): paired
comparisons over seeds and over questions. Pure functions of plain numbers.

  t_interval        mean and two-sided 95% Student-t interval of values
                    (paired differences, changes from a warm start);
  sign_test         exact two-sided sign test of paired differences;
  mcnemar           exact McNemar test on pooled paired 0/1 outcomes;
  paired_bootstrap  interval of the mean paired difference, resampling
                    seeds and questions (both with replacement).
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

import numpy as np
from scipy import stats

LEVEL = 0.95  # Every interval's confidence level.


def t_interval(values: Sequence[float]) -> dict[str, float | int | None]:
  """{"n", "mean", "std", "low", "high"}: the mean of `values` and its 95%
  t interval (mean ± t_{n-1} x std / sqrt(n)); low/high are None for fewer
  than 2 values, std None for fewer than 2."""
  values = [float(v) for v in values]
  n = len(values)
  if not n:
    raise ValueError("t_interval: no values.")
  mean = statistics.fmean(values)
  if n < 2:
    return {"n": n, "mean": mean, "std": None, "low": None, "high": None}
  std = statistics.stdev(values)
  half = stats.t.ppf(0.5 + LEVEL / 2, n - 1) * std / math.sqrt(n)
  return {"n": n, "mean": mean, "std": std, "low": mean - half,
          "high": mean + half}


def sign_test(differences: Sequence[float], tol: float = 1e-12
              ) -> dict[str, float | int]:
  """{"positive", "negative", "ties", "p"}: exact two-sided binomial test of
  the positive against the negative differences (ties, |d| <= tol, left
  out; p = 1 when every difference is a tie)."""
  positive = sum(d > tol for d in differences)
  negative = sum(d < -tol for d in differences)
  ties = len(differences) - positive - negative
  p = (stats.binomtest(positive, positive + negative, 0.5).pvalue
       if positive + negative else 1.0)
  return {"positive": positive, "negative": negative, "ties": ties,
          "p": float(p)}


def mcnemar(arm_SxQ: np.ndarray, reference_SxQ: np.ndarray
            ) -> dict[str, float | int]:
  """{"arm_only", "reference_only", "pairs", "p"}: exact McNemar test over
  every (seed, question) pair of 0/1 outcomes: the questions only the arm
  answered right against those only the reference did."""
  arm, ref = _outcomes(arm_SxQ, reference_SxQ)
  arm_only = int(np.sum((arm == 1) & (ref == 0)))
  ref_only = int(np.sum((arm == 0) & (ref == 1)))
  p = (stats.binomtest(arm_only, arm_only + ref_only, 0.5).pvalue
       if arm_only + ref_only else 1.0)
  return {"arm_only": arm_only, "reference_only": ref_only,
          "pairs": int(arm.size), "p": float(p)}


def paired_bootstrap(arm_SxQ: np.ndarray, reference_SxQ: np.ndarray, *,
                     samples: int = 10_000, seed: int = 0
                     ) -> dict[str, float]:
  """{"mean", "low", "high"}: the mean paired difference arm - reference of
  0/1 outcomes [seeds, questions] and its 95% percentile interval over
  `samples` resamples of seeds and of questions (each with replacement;
  the same questions for every seed of a resample)."""
  arm, ref = _outcomes(arm_SxQ, reference_SxQ)
  diff_SxQ = arm.astype(np.float64) - ref
  s, q = diff_SxQ.shape
  rng = np.random.default_rng(seed)
  means = np.empty(samples)
  for i in range(samples):
    rows = diff_SxQ[rng.integers(0, s, s)]
    means[i] = rows[:, rng.integers(0, q, q)].mean()
  low, high = np.quantile(means, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
  return {"mean": float(diff_SxQ.mean()), "low": float(low),
          "high": float(high)}


def _outcomes(arm_SxQ, reference_SxQ) -> tuple[np.ndarray, np.ndarray]:
  arm, ref = np.asarray(arm_SxQ), np.asarray(reference_SxQ)
  if arm.shape != ref.shape or arm.ndim != 2 or not arm.size:
    raise ValueError(f"paired outcomes: shapes {arm.shape} and {ref.shape}; "
                     "expected the same non-empty [seeds, questions].")
  if not (np.isin(arm, (0, 1)).all() and np.isin(ref, (0, 1)).all()):
    raise ValueError("paired outcomes: expected 0/1 values.")
  return arm, ref
