"""Jitted KV-cache generation: token sampling and a conversation engine.

`Engine` samples greedy, with temperature, top-k and top-p; stop token ids
end rows on device and stop strings (such as the end of a tool call) on the
host between decode chunks; it records per-token log-probs and is
reproducible from the PRNG key. Within one call it prefills what new
conversations share once, groups prefill calls by length, lets finished
rows leave the decode batch and reads the keys and values every row starts
with once (`share_prefixes=True`, `cascade=True`); each row draws its
tokens from the key and its own index in the call, so none of this changes
what a row samples.

  sampling_params.py  SamplingParams (temperature, top-k/p, stops)
  sample.py           token choice from logits, log-probs
  forward.py          the decoder's forward on a cache window, per-layer
                      weights; prefill attention row by row, cascade
                      attention
  generation.py       jitted prefill, multi-step decode chunk (cascade), row
                      copies
  prefill.py          a call's prefill plan: shared prefixes, length groups;
                      the prefix a decode call reads once
  shapes.py           each call's padded sizes: open ladders or a closed
                      set compiled at start-up
  sharing.py          conversations; what new ones share, prefilled once
  steps.py            the jitted steps, compiled once per model structure,
                      cache placement and shape (runtime/programs.py)
  placement.py        the cache and keys on the weights' devices
  precision.py        sampler weight dtypes; log-prob gap to the float32
                      model
  stop_strings.py     rows cut where their text gains a stop string
  engine.py           Engine: conversations, batching
"""

from mgrpo_jax.sampling.engine import Engine, Result
from mgrpo_jax.sampling.sample import sample_tokens
from mgrpo_jax.sampling.sampling_params import SamplingParams

__all__ = ["Engine", "Result", "SamplingParams", "sample_tokens"]
