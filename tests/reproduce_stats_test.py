"""The report's statistics against values worked out by hand or by scipy."""

import math

import numpy as np
import pytest
from scipy import stats

from mgrpo_jax import reproduce_stats as rs


def test_t_interval_matches_the_textbook_formula():
  values = [0.01, 0.03, -0.005, 0.02]
  got = rs.t_interval(values)
  mean, std = np.mean(values), np.std(values, ddof=1)
  half = stats.t.ppf(0.975, 3) * std / math.sqrt(4)
  assert got["n"] == 4 and got["mean"] == pytest.approx(mean)
  assert got["low"] == pytest.approx(mean - half)
  assert got["high"] == pytest.approx(mean + half)
  one = rs.t_interval([0.5])
  assert one["mean"] == 0.5 and one["low"] is None and one["std"] is None
  with pytest.raises(ValueError, match="no values"):
    rs.t_interval([])


def test_sign_test_drops_ties_and_is_two_sided():
  got = rs.sign_test([0.01, 0.02, 0.0, 0.03, 0.005, 0.01, 0.02, 0.04])
  assert (got["positive"], got["negative"], got["ties"]) == (7, 0, 1)
  assert got["p"] == pytest.approx(2 * 0.5 ** 7)
  assert rs.sign_test([0.0, 0.0])["p"] == 1.0
  assert rs.sign_test([1.0, -1.0])["p"] == pytest.approx(1.0)


def test_mcnemar_counts_the_discordant_pairs():
  arm = np.array([[1, 1, 0, 1], [1, 0, 1, 1]])
  ref = np.array([[0, 1, 0, 0], [1, 0, 0, 1]])
  got = rs.mcnemar(arm, ref)
  assert (got["arm_only"], got["reference_only"], got["pairs"]) == (3, 0, 8)
  assert got["p"] == pytest.approx(0.25)
  with pytest.raises(ValueError, match="same non-empty"):
    rs.mcnemar(arm, ref[:1])
  with pytest.raises(ValueError, match="0/1"):
    rs.mcnemar(arm * 2, ref)


def test_paired_bootstrap_brackets_the_mean_and_is_reproducible():
  rng = np.random.default_rng(3)
  ref = rng.integers(0, 2, (8, 200))
  arm = np.where(rng.random((8, 200)) < 0.1, 1, ref)  # ~+5 points.
  got = rs.paired_bootstrap(arm, ref, samples=2000)
  assert got["low"] < got["mean"] < got["high"]
  assert got["mean"] == pytest.approx((arm - ref).mean())
  assert got["low"] > 0  # A real improvement on every seed is resolved.
  assert rs.paired_bootstrap(arm, ref, samples=2000) == got
  same = rs.paired_bootstrap(ref, ref, samples=200)
  assert same == {"mean": 0.0, "low": 0.0, "high": 0.0}
