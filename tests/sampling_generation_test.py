"""Tests of the jit-ready generation pieces' host-side helpers."""

import numpy as np

from mgrpo_jax.sampling.generation import sampling_of
from mgrpo_jax.sampling.sampling_params import SamplingParams


def test_sampling_of_pads_stop_ids_to_a_power_of_two_of_at_least_8():
  s = sampling_of(SamplingParams(temperature=0.5, top_k=4, top_p=0.9,
                                 stop_token_ids=(3, 7)))
  assert (float(s.temperature), int(s.top_k), float(s.top_p)) == (
      0.5, 4, np.float32(0.9))
  assert s.stop_ids_K.tolist() == [3, 7] + [-1] * 6
  many = sampling_of(SamplingParams(stop_token_ids=tuple(range(9))))
  assert many.stop_ids_K.tolist() == list(range(9)) + [-1] * 7
  assert sampling_of(SamplingParams()).stop_ids_K.shape == (8,)
