"""Tests of the generation engine on a tiny random decoder."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mgrpo_jax.models import build
from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.sampling import Engine, SamplingParams
from model_test_utils import (float32_tolerance, logprob_tolerance,
                              softmax_input_scale)

CONFIG = ModelConfig(family="llama", vocab_size=128, hidden_size=64,
                     intermediate_size=128, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=16, rope_theta=1e4,
                     rms_norm_eps=1e-6, tie_word_embeddings=True)
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)
_REF_LEN = 128  # Naive reference runs on sequences padded to this length.


@functools.lru_cache(maxsize=None)
def _model(seed=0):
  """A random decoder with weights scaled up, so greedy text is not one
  token repeated and argmax ties are unlikely."""
  model = build.init_model(CONFIG, seed=seed)
  state = nnx.split(model)[1]
  nnx.update(model, jax.tree.map(lambda x: x * 10 if x.ndim > 1 else x,
                                 state))
  return model


def _engine(seed=0, **kwargs):
  """Engines share compiled steps when their cache shapes agree."""
  kwargs = dict(max_conversations=4, cache_len=96, chunk_steps=4,
                min_window=32, min_prompt_bucket=16) | kwargs
  return Engine(_model(seed), **kwargs)


def _prompt(n, seed):
  return np.random.default_rng(seed).integers(0, CONFIG.vocab_size,
                                              n).tolist()


_FORWARDS = {}


def _naive_greedy(prompt, n, seed=0, model=None):
  """The reference: a full forward of model(tokens) for every new token."""
  model = _model(seed) if model is None else model
  if id(model) not in _FORWARDS:
    graphdef, state = nnx.split(model)
    _FORWARDS[id(model)] = (
        jax.jit(lambda st, t: nnx.merge(graphdef, st)(t)), state, model)
  forward, state, _ = _FORWARDS[id(model)]
  tokens, out, logprobs = list(prompt), [], []
  for _ in range(n):
    padded = np.zeros((1, _REF_LEN), np.int32)
    padded[0, :len(tokens)] = tokens
    logits = forward(state, padded)[0, len(tokens) - 1]
    out.append(int(jnp.argmax(logits)))
    logprobs.append(float(jax.nn.log_softmax(logits)[out[-1]]))
    tokens.append(out[-1])
  return out, np.array(logprobs)


def test_greedy_matches_naive_full_forward_across_windows_and_chunks():
  engine = _engine()
  prompts = [_prompt(n, seed=n) for n in (3, 14, 9)]
  params = SamplingParams(temperature=0.0, max_new_tokens=30)
  results = engine.generate(prompts, params, jax.random.key(0))
  for prompt, result in zip(prompts, results):
    want, want_lp = _naive_greedy(prompt, 30)
    assert result.tokens == want
    # KV-cache decode at batch 4 vs a full forward at batch 1: equal up to
    # float32 rounding of the softmax inputs (see logprob_tolerance).
    np.testing.assert_allclose(result.logprobs, want_lp,
                               **logprob_tolerance(_model(), [prompt + want]))
    assert result.finish_reason == "length"
    assert result.conv_id is None
  assert engine.num_free == 4


def test_rows_of_different_lengths_equal_the_rows_run_alone():
  engine = _engine()
  prompts = [_prompt(n, seed=10 + n) for n in (13, 2, 7)]
  together = engine.generate(prompts, GREEDY, jax.random.key(0))
  for prompt, row in zip(prompts, together):
    [alone] = engine.generate([prompt], GREEDY, jax.random.key(0))
    assert row.tokens == alone.tokens  # Integers: exactly.
    # Batch 4 vs batch 1: XLA blocks the GEMMs and reductions per shape (and
    # per CPU), so the rounding differs. A log-prob moves by ~eps * S, S the
    # largest softmax input: here attention scores ~1e3, not the logits ~6,
    # so atol = 32 eps S ~ 4e-3 and rtol = 32 eps (see logprob_tolerance;
    # measured spread <= 1.5 eps S over batch 1/4/8/32 and XLA ISA flags).
    # A decode position off by one in rows > 0 moves them by 0.48, a 1%
    # temperature error there by 0.02, with the tokens unchanged.
    np.testing.assert_allclose(
        row.logprobs, alone.logprobs,
        **logprob_tolerance(_model(), [prompt + alone.tokens]))


def test_continuation_equals_fresh_prefill_of_the_whole_conversation():
  engine = _engine()
  conv = engine.start(_prompt(11, seed=1))
  [first] = engine.generate_turn([conv], GREEDY, jax.random.key(0))
  cached_before = engine.kv_cache(conv)
  tool = _prompt(6, seed=2)
  engine.extend(conv, tool)
  [cont] = engine.generate_turn([conv], GREEDY, jax.random.key(1))
  # Only the new positions were written: the old prefix is bit-identical.
  after = engine.kv_cache(conv)
  n = cached_before.slots
  np.testing.assert_array_equal(after.k[:, :, :, :n], cached_before.k)
  np.testing.assert_array_equal(after.v[:, :, :, :n], cached_before.v)

  full = engine.tokens(conv)[:11 + len(first.tokens) + len(tool)]
  fresh = engine.start(full)
  [again] = engine.generate_turn([fresh], GREEDY, jax.random.key(1))
  assert cont.tokens == again.tokens
  # Decode steps + a short prefill vs one long prefill: another blocking,
  # so float32 rounding apart (see logprob_tolerance). The cached keys and
  # values of layers >= 1 inherit the error of the softmax inputs (S) and
  # add their own rounding (eps * max |k|, |v|).
  np.testing.assert_allclose(
      cont.logprobs, again.logprobs,
      **logprob_tolerance(_model(), [full + cont.tokens]))
  scale = softmax_input_scale(_model(), [full + cont.tokens])
  for kept, refilled in [(engine.kv_cache(conv).k, engine.kv_cache(fresh).k),
                         (engine.kv_cache(conv).v, engine.kv_cache(fresh).v)]:
    np.testing.assert_allclose(kept, refilled, atol=float32_tolerance(
        max(scale, float(np.abs(refilled).max()))))
  want, _ = _naive_greedy(full, len(cont.tokens))
  assert cont.tokens == want
  engine.release(conv)
  engine.release(fresh)


def test_shared_prompt_prefixes_are_prefilled_once_with_the_same_results():
  system = _prompt(20, seed=40)
  q0, q1 = system + [1, 2, 3, 4, 5], system + [6, 7, 8, 9, 10, 11, 12]
  prompts = [q0, q1, q0, q0]  # Three rollouts of q0, one of q1.
  params = SamplingParams(temperature=1.0, max_new_tokens=8)
  shared, unshared = _engine(), _engine(share_prefixes=False)
  a = shared.generate(prompts, params, jax.random.key(3))
  b = unshared.generate(prompts, params, jax.random.key(3))
  # The system prompt once (20), the rest of q0 once (5: its three rows
  # sample after it), q1's rest (7).
  assert shared.prefilled_tokens == 20 + 5 + 7
  assert unshared.prefilled_tokens == 3 * 25 + 27
  # Padded slots: the system prompt [1, 32], then q0's rest (its three rows
  # sample after it) and q1's rest, [1, 16] each; unshared, one [4, 32].
  assert shared.prefill_slots == 32 + 2 * 16
  assert unshared.prefill_slots == 4 * 32
  assert shared.seconds["copy"] > 0 == unshared.seconds["copy"]
  assert min(shared.seconds.values()) >= 0
  assert unshared.seconds["prefill"] > 0 and unshared.seconds["decode"] > 0
  assert [r.tokens for r in a] == [r.tokens for r in b]
  for r, s in zip(a, b):
    np.testing.assert_allclose(r.logprobs, s.logprobs, **logprob_tolerance(
        _model(), [p + s.tokens for p in prompts]))
  assert [r.tokens for r in a][0] != [r.tokens for r in a][2]  # own draws
  [greedy] = shared.generate([q1], GREEDY, jax.random.key(0))
  many = shared.generate([q1, q0, q1], GREEDY, jax.random.key(0))
  assert many[0].tokens == many[2].tokens == greedy.tokens
  assert many[1].tokens == _naive_greedy(q0, 12)[0]


def test_decode_reads_a_prefix_every_row_shares_once():
  system = _prompt(40, seed=60)  # Slots [0, 32) are read once.
  prompts = [system + _prompt(n, seed=61 + n) for n in (3, 9, 5)]
  on, off = _engine(), _engine(cascade=False)
  for params in (GREEDY, SamplingParams(temperature=1.0, max_new_tokens=12)):
    a = on.generate(prompts, params, jax.random.key(5))
    b = off.generate(prompts, params, jax.random.key(5))
    assert [r.tokens for r in a] == [r.tokens for r in b]
    for prompt, r, s in zip(prompts, a, b):
      np.testing.assert_allclose(r.logprobs, s.logprobs, **logprob_tolerance(
          _model(), [prompt + s.tokens]))
  assert on.cascade_chunks > 0 == off.cascade_chunks
  for prompt, r in zip(prompts, on.generate(prompts, GREEDY,
                                            jax.random.key(0))):
    assert r.tokens == _naive_greedy(prompt, 12)[0]
  # One row, or rows that share less than a window, read their own slots.
  chunks = on.cascade_chunks
  on.generate(prompts[:1], GREEDY, jax.random.key(0))
  on.generate([_prompt(40, seed=70), _prompt(40, seed=71)], GREEDY,
              jax.random.key(0))
  assert on.cascade_chunks == chunks


def test_once_every_conversation_is_released_calls_start_afresh():
  # The engine keeps a call's shared prefix (64 slots here) for later calls
  # while conversations stay open; once none is, a call must not depend on
  # earlier ones (a run resumed from a checkpoint makes it on a new engine).
  system = _prompt(70, seed=80)
  first = [system + _prompt(3, seed=81 + i) for i in range(3)]
  longer = system + _prompt(30, seed=85)  # Rows then share 100 tokens.
  later = [longer + _prompt(2, seed=86 + i) for i in range(3)]
  used, fresh = _engine(cache_len=160), _engine(cache_len=160)
  params = SamplingParams(temperature=1.0, max_new_tokens=12)
  used.generate(first, params, jax.random.key(1))
  a = used.generate(later, params, jax.random.key(2))
  b = fresh.generate(later, params, jax.random.key(2))
  assert [r.tokens for r in a] == [r.tokens for r in b]
  for r, s in zip(a, b):
    np.testing.assert_array_equal(r.logprobs, s.logprobs)


def test_rows_that_finish_leave_the_batch_and_others_keep_their_draws():
  engine = _engine(cache_len=96, chunk_steps=4)
  params = SamplingParams(temperature=1.0, max_new_tokens=20)
  row = _prompt(10, seed=50)
  early = _prompt(90, seed=51)  # 6 slots left: done after 6 tokens.
  late = _prompt(12, seed=52)
  before = engine.decoded_rows
  with_early = engine.generate([early, row], params, jax.random.key(4))
  # 19 tokens after the prefill's: chunks of 4 at batch 2, 2, then 1, 1, 1.
  assert engine.decoded_rows - before == 2 + 2 + 1 + 1 + 1
  with_late = engine.generate([late, row], params, jax.random.key(4))
  assert len(with_early[0].tokens) == 6
  assert len(with_early[1].tokens) == len(with_late[1].tokens) == 20
  # The row draws as row 1 even once it is alone in the batch.
  assert with_early[1].tokens == with_late[1].tokens


def test_same_key_same_tokens_different_key_different_tokens():
  engine = _engine()
  prompts = [_prompt(5, seed=3), _prompt(8, seed=4)]
  params = SamplingParams(temperature=1.0, max_new_tokens=10)
  a = engine.generate(prompts, params, jax.random.key(7))
  b = engine.generate(prompts, params, jax.random.key(7))
  c = engine.generate(prompts, params, jax.random.key(8))
  assert [r.tokens for r in a] == [r.tokens for r in b]
  assert [r.tokens for r in a] != [r.tokens for r in c]
  for r, s in zip(a, b):
    np.testing.assert_array_equal(r.logprobs, s.logprobs)


def test_stop_token_ids_end_rows_and_keep_the_stop_token():
  engine = _engine()
  prompts = [_prompt(6, seed=5), _prompt(9, seed=6)]
  free = engine.generate(prompts, GREEDY, jax.random.key(0))
  ref = free[0].tokens
  j = next(i for i in range(2, len(ref)) if ref[i] not in ref[:i])
  stop = SamplingParams(temperature=0.0, max_new_tokens=12,
                        stop_token_ids=(ref[j],))
  out = engine.generate(prompts, stop, jax.random.key(0))
  assert out[0].tokens == ref[:j + 1]
  assert out[0].finish_reason == "stop"
  np.testing.assert_allclose(
      out[0].logprobs, free[0].logprobs[:j + 1],
      **logprob_tolerance(_model(), [prompts[0] + ref[:j + 1]]))
  other = free[1].tokens
  if ref[j] not in other:
    assert out[1].tokens == other and out[1].finish_reason == "length"


def _text(ids):
  """A toy detokenizer: two letters per token."""
  letters = "abcdefghijklmnopqrstuvwxyz"
  return "".join(letters[i % 26] + letters[(i // 26) % 26] for i in ids)


def test_stop_strings_truncate_right_after_the_completing_token():
  engine = _engine(decode_fn=_text)
  prompt = _prompt(7, seed=8)
  [free] = engine.generate([prompt], GREEDY, jax.random.key(0))
  text = _text(free.tokens)
  stop_string = text[9:14]  # Spans tokens 4..6 (two letters each).
  want = next(k for k in range(1, 13) if stop_string in _text(free.tokens[:k]))
  params = SamplingParams(temperature=0.0, max_new_tokens=12,
                          stop_strings=(stop_string, "never-there"))
  [out] = engine.generate([prompt], params, jax.random.key(0), keep=True)
  assert out.tokens == free.tokens[:want]
  assert len(out.logprobs) == want
  assert out.finish_reason == "stop"
  # The conversation holds exactly the kept tokens and continues from them.
  assert engine.tokens(out.conv_id) == prompt + free.tokens[:want]
  [more] = engine.generate_turn([out.conv_id], GREEDY, jax.random.key(0))
  want_more, _ = _naive_greedy(prompt + free.tokens[:want], 12)
  assert more.tokens == want_more
  engine.release(out.conv_id)


def test_max_new_tokens_and_the_cache_end_give_length():
  engine = _engine()
  params = SamplingParams(temperature=1.0, max_new_tokens=5)
  short, near_end = engine.generate([_prompt(4, seed=9), _prompt(93, seed=9)],
                                    params, jax.random.key(0))
  assert len(short.tokens) == 5 and short.finish_reason == "length"
  assert len(near_end.tokens) == 3 and near_end.finish_reason == "length"
  [full] = engine.generate([_prompt(96, seed=9)], params, jax.random.key(0))
  assert full.tokens == [] and full.finish_reason == "length"


def test_compilations_stay_bounded_and_weight_updates_do_not_recompile():
  engine = _engine()
  rng = np.random.default_rng(0)
  shapes = [(int(rng.integers(1, 4)), int(rng.integers(1, 30)))
            for _ in range(8)]

  def run_all():
    for b, t in shapes:
      prompts = [_prompt(t + i, seed=i) for i in range(b)]
      engine.generate(prompts, SamplingParams(max_new_tokens=4),
                      jax.random.key(b))

  start = engine.trace_counts
  run_all()
  first = engine.trace_counts
  # Batch buckets {1, 2, 4} x prompt buckets {16, 32} x window 32 (prefill),
  # batch buckets x window 32 (decode); counts are shared by every engine of
  # this model structure, so compare differences.
  new = {k: first.get(k, 0) - start.get(k, 0) for k in first}
  assert new.get("prefill", 0) <= 6 and new.get("decode", 0) <= 3, new
  run_all()
  assert engine.trace_counts == first

  prompt = [_prompt(10, seed=1)]
  before = engine.generate(prompt, GREEDY, jax.random.key(0))[0].tokens
  engine.update_weights(nnx.split(_model(seed=1))[1])
  after = engine.generate(prompt, GREEDY, jax.random.key(0))[0].tokens
  assert engine.trace_counts == first
  assert after == _naive_greedy(prompt[0], 12, seed=1)[0]
  assert after != before


def test_bad_inputs_raise_clear_errors():
  engine = _engine(cache_len=32)
  with pytest.raises(ValueError, match="prompt_tokens is empty"):
    engine.start([])
  with pytest.raises(ValueError, match=r"33 tokens, more than cache_len=32"):
    engine.start(_prompt(33, seed=0))
  with pytest.raises(ValueError, match=r"outside \[0, vocab_size=128\)"):
    engine.start([5, 128])
  with pytest.raises(KeyError, match="unknown conversation id 12345"):
    engine.generate_turn([12345], GREEDY, jax.random.key(0))
  conv = engine.start([1, 2, 3])
  with pytest.raises(ValueError, match=f"conversation {conv} would hold 33"):
    engine.extend(conv, _prompt(30, seed=0))
  with pytest.raises(ValueError, match="needs a decode_fn"):
    engine.generate_turn([conv], SamplingParams(stop_strings=("x",)),
                         jax.random.key(0))
  with pytest.raises(ValueError, match="repeat a conversation"):
    engine.generate_turn([conv, conv], GREEDY, jax.random.key(0))
  engine.release(conv)
  with pytest.raises(KeyError, match=f"unknown conversation id {conv}"):
    engine.release(conv)
  with pytest.raises(ValueError, match="update_weights"):
    engine.update_weights(nnx.split(build.init_model(
        ModelConfig(**{**CONFIG.__dict__, "hidden_size": 32})))[1])


def test_truncate_prompts_keeps_the_last_tokens():
  engine = _engine(cache_len=32, truncate_prompts=True)
  prompt = _prompt(40, seed=0)
  conv = engine.start(prompt)
  assert engine.tokens(conv) == prompt[-32:]


@pytest.mark.parametrize("family, extra", [
    ("qwen2", dict(attention_bias=True)),
    ("qwen3", dict(qk_norm=True, tie_word_embeddings=False)),
])
def test_other_families_match_naive_full_forward(family, extra):
  config = ModelConfig(**{**CONFIG.__dict__, "family": family, **extra})
  model = build.init_model(config, seed=3)
  state = nnx.split(model)[1]
  # Non-trivial biases / norms, so those code paths matter.
  nnx.update(model, jax.tree.map(
      lambda x: x * 10 + 0.1 if x.ndim > 1 else x + 0.3, state))
  engine = Engine(model, max_conversations=1, cache_len=32, chunk_steps=4,
                  min_window=32, min_prompt_bucket=16)
  prompt = _prompt(9, seed=4)
  [out] = engine.generate([prompt], SamplingParams(temperature=0.0,
                                                   max_new_tokens=6),
                          jax.random.key(0))
  assert out.tokens == _naive_greedy(prompt, 6, model=model)[0]


def test_a_batch_larger_than_the_engines_rows():
  """More prompts than rows: one-shot generation runs them in waves (each
  row's text as if alone); keeping them open, or generating with every row
  taken, is refused with the counts."""
  engine = _engine(max_conversations=2)
  prompts = [_prompt(n, seed=n) for n in (4, 9, 6, 11, 5)]
  results = engine.generate(prompts, GREEDY, jax.random.key(0))
  assert [r.tokens for r in results] == [_naive_greedy(p, 12)[0]
                                         for p in prompts]
  assert engine.num_free == 2
  with pytest.raises(ValueError, match=r"3 prompts with keep=True but only "
                     r"2 free rows"):
    engine.generate(prompts[:3], GREEDY, jax.random.key(0), keep=True)
  assert engine.num_free == 2  # Nothing was started.
  engine.generate(prompts[:2], GREEDY, jax.random.key(0), keep=True)
  with pytest.raises(ValueError, match=r"no free cache rows \(all "
                     r"max_conversations=2 in use\)"):
    engine.generate(prompts[2:3], GREEDY, jax.random.key(0))
  with pytest.raises(ValueError, match=r"all max_conversations=2 rows are "
                     r"in use; release finished conversations first"):
    engine.start(prompts[2])
