"""Tests of SamplingParams validation."""

import pytest

from mgrpo_jax.sampling import SamplingParams


def test_defaults_sample_and_zero_temperature_is_greedy():
  assert not SamplingParams().greedy
  assert SamplingParams(temperature=0).greedy


@pytest.mark.parametrize("kwargs, field", [
    (dict(temperature=-0.5), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_k=-1), "top_k"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(stop_token_ids=(-3,)), "stop_token_ids"),
    (dict(stop_strings=("",)), "stop_strings"),
])
def test_bad_values_name_the_field(kwargs, field):
  with pytest.raises(ValueError, match=f"SamplingParams.{field}="):
    SamplingParams(**kwargs)


def test_sequences_are_stored_as_tuples():
  params = SamplingParams(stop_token_ids=[2, 3], stop_strings="</tool_call>")
  assert params.stop_token_ids == (2, 3)
  assert params.stop_strings == ("</tool_call>",)
