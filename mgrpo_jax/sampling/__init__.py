"""Jitted KV-cache generation: token sampling and a conversation engine."""

from mgrpo_jax.sampling.engine import Engine, Result
from mgrpo_jax.sampling.sample import sample_tokens
from mgrpo_jax.sampling.sampling_params import SamplingParams

__all__ = ["Engine", "Result", "SamplingParams", "sample_tokens"]
