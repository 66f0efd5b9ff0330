"""The generation engine: many live conversations over one preallocated cache.

Each conversation owns one row of a KV cache [L, R, G, S, Dh] (R =
`max_conversations`, S = `cache_len`). A conversation's tokens are either in
the cache (positions [0, cached)) or pending (the prompt, appended tool
results, and the last sampled token, which is never fed through the model
until the conversation continues). `generate_turn` prefills every row's
pending tokens in one jitted call, which also samples the first new token,
then runs jitted decode chunks of `chunk_steps` steps until every row is
done. Between chunks the host checks stop strings. Both steps run
`sampling.forward` (the decoder's math over per-layer weight copies, made
once per weight update, which decodes much faster on CPU than the decoder's
layer scan). Every call's padded sizes come from `sampling.shapes.Shapes`:
open ladders by default (prefill rows, prompt length and cache window on
powers of two, decode rows on the finer x1.5 ladder), or a closed set
whose every program `precompile` compiles up front; `strict_shapes=True`
then refuses a call outside it (`runtime.programs.ShapeError`).

Typical use by a rollout controller::

  engine = Engine(model, max_conversations=64, cache_len=4096)
  conv = engine.start(prompt_ids)
  [result] = engine.generate_turn([conv], params, key)
  engine.extend(conv, tool_result_ids)     # only these are prefilled next
  [result] = engine.generate_turn([conv], params, next_key)
  engine.release(conv)
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mgrpo_jax.models.decoder import Decoder, KVCache
from mgrpo_jax.runtime.programs import layout_of
from mgrpo_jax.sampling import (generation, placement, precision, prefill,
                                sharing, steps, stop_strings)
from mgrpo_jax.sampling.sampling_params import SamplingParams
from mgrpo_jax.sampling.sharing import Conversation
from mgrpo_jax.sampling.shapes import CASCADE_SLOTS, Shapes

DecodeFn = Callable[[list[int]], str]


@dataclasses.dataclass(frozen=True)
class Result:
  """One row's output of a generation call."""
  tokens: list[int]  # Generated ids, ending with the stop token if any.
  logprobs: np.ndarray  # float32 [n]: log-prob of each generated token.
  finish_reason: str  # "stop" (stop id / stop string) or "length".
  conv_id: int | None  # Conversation to extend / continue; None if released.


class Engine:
  """Batched generation over live conversations (see the module docstring)."""

  def __init__(self, model: Decoder, *, max_conversations: int = 8,
               cache_len: int = 2048, chunk_steps: int = 16,
               min_window: int = 64, min_prompt_bucket: int = 16,
               truncate_prompts: bool = False, cache_dtype: Any = None,
               weights_dtype: Any = None,
               decode_fn: DecodeFn | Any = None, share_prefixes: bool = True,
               cascade: bool = True, shapes: Shapes | None = None,
               strict_shapes: bool = False):
    """Allocates the cache and prepares (lazily compiled) jitted steps.

    Args:
      model: the decoder; its weights can later be replaced with
        `update_weights` without recompiling.
      max_conversations: R, cache rows = most conversations alive at once.
      cache_len: S, most tokens one conversation may hold (prompt, tool
        results and generated tokens together).
      chunk_steps: N, decode steps per jitted call (host work and stop-string
        checks happen between chunks).
      min_window: smallest cache window W (slots) a call runs on.
      min_prompt_bucket: smallest padded prefill length T.
      truncate_prompts: when a prompt is longer than `cache_len`, keep its
        last `cache_len` tokens instead of raising ValueError.
      cache_dtype: dtype of the cache; defaults to the model's compute dtype.
      weights_dtype: dtype of the sampler's copy of the weight matrices
        (`precision.WEIGHTS_DTYPES`; None: the model's own). "bfloat16"
        under a float32 model halves the bytes a decode step reads: each
        matmul rounds its input to bfloat16 and accumulates in float32
        (`models.decoder.matmul`); norms, biases, attention and sampling
        stay float32. Its log-probs then differ from the float32 model's
        (a learner corrects them as stale data, `off_policy`).
      decode_fn: `list[int] -> str`, or a tokenizer with `.decode`; needed
        only for stop strings (may also be passed per call).
      share_prefixes: prefill a prompt prefix that new conversations of one
        call share once and copy its keys/values (`sampling.sharing`).
      cascade: when the rows of a decode call start with the same tokens
        (a system prompt; rounded down to a multiple of CASCADE_SLOTS),
        read those slots once for all rows instead of once per row
        (`prefill.cascade_prefix`, `generation.decode_chunk`).
      shapes: the calls' padded sizes (`sampling.shapes.Shapes`, whose
        max_rows, cache_len, min_window and min_prompt must be this
        engine's); None: the open ladders.
      strict_shapes: refuse (`runtime.programs.ShapeError`) a call whose
        program was not compiled (by `precompile` or an earlier call).
    """
    for name, value in (("max_conversations", max_conversations),
                        ("cache_len", cache_len), ("chunk_steps", chunk_steps),
                        ("min_window", min_window),
                        ("min_prompt_bucket", min_prompt_bucket)):
      if not isinstance(value, int) or value < 1:
        raise ValueError(f"Engine {name}={value!r}: expected a positive "
                         "integer.")
    self.shapes = Shapes.of_engine(shapes, max_conversations, cache_len,
                                   min_window, min_prompt_bucket)
    self.strict_shapes = bool(strict_shapes)
    self.config = model.config
    self.max_conversations = max_conversations
    self.cache_len = cache_len
    self.chunk_steps = chunk_steps
    self.min_window = min_window
    self.min_prompt_bucket = min_prompt_bucket
    self.truncate_prompts = truncate_prompts
    self.decode_fn = decode_fn
    self.share_prefixes = share_prefixes
    self.cascade = cascade
    self.prefilled_tokens = 0  # Tokens fed through prefill, padding aside.
    self.prefill_slots = 0  # Rows x length of every prefill call, padding in.
    self.decoded_rows = 0  # Batch rows of every decode chunk, padding in.
    self.cascade_chunks = 0  # Decode chunks that read a shared prefix once.
    # Wall seconds in each kind of jitted step, the wait for results in.
    self.seconds = {"prefill": 0.0, "copy": 0.0, "decode": 0.0}
    self._dtype = model.dtype
    self._graphdef, state = nnx.split(model)
    self._param_shapes = precision.describe(state)
    self._weights_dtype = precision.weights_dtype_name(weights_dtype)
    cache = KVCache.zeros(self.config, max_conversations, cache_len,
                          cache_dtype or model.dtype)
    self._place = placement.of_weights(state, cache.k.shape)  # Devices.
    self._cache = self._place.cache(cache)
    self._steps = steps.compiled_steps(self._graphdef,
                                       self._place.cache_sharding)
    self._weights = self._steps.split(state, self._weights_dtype)
    self.weights_version = -1  # Set by `update_weights`.
    # Weights and cache keep their layout: the programs' key for them.
    self._layout = layout_of((self._weights, self._cache))
    self._conversations: dict[int, Conversation] = {}
    self._free_rows = list(range(max_conversations))
    self._next_id = 0
    self._shared = 0  # Last decode call's shared prefix, while any is open.

  # ---------------------------------------------------------------- weights

  def update_weights(self, weights: nnx.State | Decoder,
                     version: int = -1) -> None:
    """Replaces the weights (same structure, shapes, dtypes): no recompile.

    The stacked layer weights are copied once into per-layer arrays.
    `version` (e.g. the learner's update count) is recorded as
    `weights_version` and travels with every trajectory sampled from now on
    (-1: unknown).
    """
    state = (nnx.split(weights)[1] if isinstance(weights, nnx.Module)
             else weights)
    if precision.describe(state) != self._param_shapes:
      raise ValueError("Engine.update_weights: the new weights do not match "
                       "the model's parameter structure, shapes and dtypes.")
    # Placed as the first weights were: the compiled programs expect that.
    self._weights = jax.device_put(
        self._steps.split(state, self._weights_dtype),
        jax.tree.map(lambda x: x.sharding, self._weights))
    self.weights_version = int(version)

  def precompile(self, stop_ids: int = 1, *, key: jax.Array | None = None,
                 threads: int = 2) -> tuple[int, float]:
    """Compiles every program `shapes.programs()` lists, `threads` at a time
    (through the persistent compilation cache, so a second start loads
    them); returns (programs in the set, seconds). Calls then run these
    programs; with `strict_shapes` nothing else runs.

    stop_ids: how many stop ids the calls will pass (their padded count is
      a program's shape too); key: a PRNG key like the calls' (default
      `jax.random.key(0)`: typed keys).
    """
    calls = steps.example_calls(
        self.shapes.programs(), self.config, self._dtype, self.chunk_steps,
        self._weights, self._cache, stop_ids,
        self._place.key(jax.random.key(0) if key is None else key))
    return self._steps.precompile(calls, self._layout, threads)

  @property
  def trace_counts(self) -> dict[str, int]:
    """Traces (= compilations) of each jitted step so far: shared by every
    engine of the same model structure and cache placement, as the steps
    are."""
    return dict(self._steps.traces)

  # ---------------------------------------------------------- conversations

  def start(self, prompt_tokens: Sequence[int]) -> int:
    """Opens a conversation with a non-empty prompt; returns its id."""
    tokens = self._check_tokens(prompt_tokens, "prompt_tokens")
    if not tokens:
      raise ValueError("Engine.start: prompt_tokens is empty; a conversation "
                       "needs at least one token.")
    if len(tokens) > self.cache_len:
      if not self.truncate_prompts:
        raise ValueError(
            f"Engine.start: prompt of conversation {self._next_id} has "
            f"{len(tokens)} tokens, more than cache_len={self.cache_len} "
            "(pass truncate_prompts=True to keep its last tokens).")
      tokens = tokens[-self.cache_len:]
    if not self._free_rows:
      raise ValueError(f"Engine.start: all max_conversations="
                       f"{self.max_conversations} rows are in use; release "
                       "finished conversations first.")
    conv_id = self._next_id
    self._next_id += 1
    self._conversations[conv_id] = Conversation(self._free_rows.pop(0),
                                                 tokens, 0)
    return conv_id

  def extend(self, conv_id: int, tokens: Sequence[int]) -> None:
    """Appends tokens (e.g. a tool result); only they are prefilled next."""
    conv = self._get(conv_id)
    tokens = self._check_tokens(tokens, "tokens")
    if len(conv.tokens) + len(tokens) > self.cache_len:
      raise ValueError(
          f"Engine.extend: conversation {conv_id} would hold "
          f"{len(conv.tokens) + len(tokens)} tokens, more than cache_len="
          f"{self.cache_len}.")
    conv.tokens.extend(tokens)

  def release(self, conv_id: int) -> None:
    """Ends a conversation and frees its cache row."""
    self._free_rows.append(self._get(conv_id).row)
    del self._conversations[conv_id]
    if not self._conversations:  # Calls from here on do not depend on
      self._shared = 0           # earlier ones (a resumed run makes them).

  def tokens(self, conv_id: int) -> list[int]:
    """Every token of a conversation (prompt, generated, appended)."""
    return list(self._get(conv_id).tokens)

  def kv_cache(self, conv_id: int) -> KVCache:
    """The cached keys/values of a conversation: [L, 1, G, cached, Dh]."""
    conv = self._get(conv_id)
    take = lambda x: x[:, conv.row:conv.row + 1, :, :conv.cached]
    return KVCache(take(self._cache.k), take(self._cache.v))

  @property
  def num_free(self) -> int:
    """Conversations that can still be started."""
    return len(self._free_rows)

  # ------------------------------------------------------------- generation

  def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
               key: jax.Array, *, keep: bool = False,
               decode_fn: DecodeFn | Any = None) -> list[Result]:
    """One-shot generation for a batch of prompts (token id lists).

    With keep=False the conversations are released afterwards (results
    carry conv_id None), and more prompts than free rows are run in waves;
    with keep=True they stay open for `extend` / `generate_turn`.
    """
    if not prompts:
      raise ValueError("Engine.generate: prompts is empty.")
    if keep and len(prompts) > self.num_free:
      raise ValueError(f"Engine.generate: {len(prompts)} prompts with "
                       f"keep=True but only {self.num_free} free rows.")
    if self.num_free == 0:
      raise ValueError("Engine.generate: no free cache rows (all "
                       f"max_conversations={self.max_conversations} in use).")
    results = []
    wave = len(prompts) if keep else self.num_free
    for w, begin in enumerate(range(0, len(prompts), wave)):
      ids = [self.start(p) for p in prompts[begin:begin + wave]]
      wave_key = key if w == 0 else jax.random.fold_in(key, w)
      out = self.generate_turn(ids, params, wave_key, decode_fn=decode_fn)
      if not keep:
        for conv_id in ids:
          self.release(conv_id)
        out = [dataclasses.replace(r, conv_id=None) for r in out]
      results.extend(out)
    return results

  def generate_turn(self, conv_ids: Sequence[int], params: SamplingParams,
                    key: jax.Array, *,
                    decode_fn: DecodeFn | Any = None) -> list[Result]:
    """Continues each conversation with one generated turn.

    The pending tokens of every row (prompt or appended tokens, plus the
    last token generated before) are prefilled, then tokens are sampled
    until each row meets a stop id, a stop string, `max_new_tokens` or the
    cache end. Generated tokens join the conversation. Rows are
    independent: a row's tokens do not depend on the other rows (greedy
    exactly; sampled given the row's index in `conv_ids` and the key).
    """
    if not isinstance(params, SamplingParams):
      raise TypeError(f"Engine.generate_turn: params is {type(params)!r}; "
                      "expected SamplingParams.")
    if not conv_ids:
      raise ValueError("Engine.generate_turn: conv_ids is empty.")
    if len(set(conv_ids)) != len(conv_ids):
      raise ValueError(f"Engine.generate_turn: conv_ids {list(conv_ids)} "
                       "repeat a conversation.")
    convs = [self._get(c) for c in conv_ids]
    decode_text = stop_strings.text_decoder(
        self.decode_fn if decode_fn is None else decode_fn, params.stop_strings)
    b = len(convs)
    prior = np.array([len(c.tokens) for c in convs], np.int32)
    budget = np.minimum(params.max_new_tokens,
                        self.cache_len - prior).astype(np.int32)
    sampling = generation.sampling_of(params)
    prefill_key = jax.random.fold_in(key, 0)

    # Prefill the pending tokens (what rows share once, the rest in calls
    # grouped by length); sample each row's first new token.
    first = np.zeros(b, np.int32)
    first_lp = np.zeros(b, np.float32)
    if self.share_prefixes:
      sharing.share_prefixes(convs, self.min_prompt_bucket, self._prefill,
                             self._copy, sampling, prefill_key, first,
                             first_lp)
    todo = [i for i, c in enumerate(convs) if c.cached < len(c.tokens)]
    pending = [convs[i].tokens[convs[i].cached:] for i in todo]
    for group in prefill.plan_calls([len(p) for p in pending],
                                    self.min_prompt_bucket,
                                    self.max_conversations):
      rows = [todo[j] for j in group]
      first[rows], first_lp[rows] = self._prefill(
          [convs[i] for i in rows], [pending[j] for j in group], sampling,
          prefill_key, rows)
    generated = [[int(first[i])] if budget[i] > 0 else [] for i in range(b)]
    logprobs = [[float(first_lp[i])] if budget[i] > 0 else []
                for i in range(b)]
    stop_ids = set(params.stop_token_ids)
    done = np.array([not g or g[-1] in stop_ids or len(g) >= budget[i]
                     for i, g in enumerate(generated)])
    by_string = stop_strings.truncate(generated, logprobs, [0] * b, done,
                                      params.stop_strings, decode_text)

    # Decode in chunks until every row is done; each chunk runs only the
    # rows still live (finished rows leave the batch, whose bucket shrinks).
    # A closed set rounds each chunk's prefix to its window's (below).
    shared = (prefill.cascade_prefix(
        [c.tokens for c in convs], [c.cached for c in convs],
        1 if self.shapes.closed else CASCADE_SLOTS,
        0 if self.shapes.closed else self._shared) if self.cascade else 0)
    self._shared = shared or self._shared
    chunk = 0
    while not done.all():
      chunk += 1
      live = np.flatnonzero(~done)
      bp = self.shapes.decode_rows(len(live))  # Open: 20 rows in 24.
      pad = bp - len(live)
      padded = lambda x, fill: np.concatenate(
          [np.asarray(x)[live], np.full(pad, fill)]).astype(np.int32)
      count_all = np.array(list(map(len, generated)), np.int32)
      count = padded(count_all, 0)
      last = padded([g[-1] for g in generated], 0)
      position = padded(prior + count_all - 1, self.cache_len)
      window = self.shapes.decode_window(
          int(position[:len(live)].max()) + self.chunk_steps)
      prefix = self.shapes.prefix(shared, window) if len(live) > 1 else 0
      self.decoded_rows += bp
      self.cascade_chunks += prefix > 0
      start = time.perf_counter()
      self._cache, out = self._steps.decode.run(
          (self.config, self._dtype, window, self.chunk_steps, prefix,
           self._weights, self._cache,
           padded([c.row for c in convs], self.max_conversations),
           np.int32(convs[live[0]].row), last, position, count,
           padded(budget, 0), np.arange(bp) >= len(live),
           padded(np.arange(b), 0), sampling,
           self._place.key(jax.random.fold_in(key, chunk))),
          strict=self.strict_shapes, layout=self._layout)
      toks, lps, new_count, new_done = (
          np.asarray(out.tokens_BxN), np.asarray(out.logprobs_BxN),
          np.asarray(out.count_B), np.asarray(out.done_B))
      self.seconds["decode"] += time.perf_counter() - start
      for j, i in enumerate(live):
        n = int(new_count[j] - count[j])
        generated[i].extend(int(x) for x in toks[j, :n])
        logprobs[i].extend(float(x) for x in lps[j, :n])
        done[i] = new_done[j]
      by_string |= stop_strings.truncate(generated, logprobs, count_all,
                                         done, params.stop_strings,
                                         decode_text)

    results = []
    for i, (conv_id, c) in enumerate(zip(conv_ids, convs)):
      g = generated[i]
      stopped = bool(g) and (by_string[i] or g[-1] in stop_ids)
      c.tokens.extend(g)
      # Every token but the last generated one has been fed to the model.
      c.cached = len(c.tokens) - 1 if g else len(c.tokens)
      results.append(Result(g, np.asarray(logprobs[i], np.float32),
                            "stop" if stopped else "length", conv_id))
    return results

  @property
  def cache_dtype(self) -> Any:
    """dtype of the KV cache."""
    return self._cache.k.dtype

  @property
  def weights_dtype(self) -> str:
    """dtype name of the sampler's weight matrices ("float32", ...)."""
    return jnp.dtype(self._weights.embed.dtype).name

  # ---------------------------------------------------------------- helpers

  def _get(self, conv_id: int) -> Conversation:
    if conv_id not in self._conversations:
      raise KeyError(f"Engine: unknown conversation id {conv_id!r} (never "
                     "started, or released).")
    return self._conversations[conv_id]

  def _check_tokens(self, tokens: Sequence[int], name: str) -> list[int]:
    out = [int(x) for x in tokens]
    bad = [x for x in out if not 0 <= x < self.config.vocab_size]
    if bad:
      raise ValueError(f"Engine: {name} holds ids {bad[:5]} outside "
                       f"[0, vocab_size={self.config.vocab_size}).")
    return out

  def _prefill(self, convs: list[Conversation], pending: list[list[int]],
               sampling: generation.Sampling, key: jax.Array,
               draws: Sequence[int], sources: Sequence[int] | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Writes each conversation's `pending` tokens (at least one each) at
    its next positions; returns tokens sampled after them and their
    log-probs: draw m samples after conversation `sources[m]` (default: one
    draw per conversation, in order) with `draws[m]`. Rows with more than
    `shapes.chunk` tokens prefill them in calls of that many first (what
    those calls sample is dropped)."""
    limit = self.shapes.chunk
    while limit and max(map(len, pending)) > limit:
      long = [j for j, p in enumerate(pending) if len(p) > limit]
      self._prefill_call([convs[j] for j in long],
                         [pending[j][:limit] for j in long], sampling, key,
                         range(len(long)))
      pending = [p[limit:] if len(p) > limit else p for p in pending]
    return self._prefill_call(convs, pending, sampling, key, draws, sources)

  def _prefill_call(self, convs: list[Conversation],
                    pending: list[list[int]], sampling: generation.Sampling,
                    key: jax.Array, draws: Sequence[int],
                    sources: Sequence[int] | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """One jitted prefill call of `_prefill`."""
    n = len(convs)
    bp = self.shapes.call_rows(n)
    pad = [0] * (bp - n)
    t = self.shapes.prompt_tokens(max(map(len, pending)))
    tokens_BxT = np.zeros((bp, t), np.int32)
    for i, p in enumerate(pending):
      tokens_BxT[i, :len(p)] = p
    rows = [c.row for c in convs] + [self.max_conversations] * len(pad)
    start = [c.cached for c in convs] + pad
    length = list(map(len, pending)) + pad
    window = self.shapes.prefill_window(max(s + l for s, l in zip(start,
                                                                  length)))
    sources = list(range(n)) if sources is None else list(sources)
    # Draws pad to max_conversations: a prefill shape is one program
    # whatever its fan-out (logits of a few more rows cost little).
    m = len(draws)
    fill = [0] * (self.max_conversations - m)
    begin = time.perf_counter()
    self._cache, first, first_lp = self._steps.prefill.run(
        (self.config, self._dtype, window, self._weights, self._cache,
         np.array(rows, np.int32), tokens_BxT, np.array(start, np.int32),
         np.array(length, np.int32), np.array(sources + fill, np.int32),
         np.array(list(draws) + fill, np.int32), sampling,
         self._place.key(key)),
        strict=self.strict_shapes, layout=self._layout)
    first, first_lp = np.asarray(first)[:m], np.asarray(first_lp)[:m]
    self.seconds["prefill"] += time.perf_counter() - begin
    for c, p in zip(convs, pending):
      c.cached += len(p)
    self.prefilled_tokens += sum(length)
    self.prefill_slots += bp * t
    return first, first_lp

  def _copy(self, sources: list[Conversation],
            targets: list[Conversation], slots: int) -> None:
    """Slots [0, slots) of each source row copied into its target row."""
    bp = self.shapes.call_rows(len(targets))
    pad = [self.max_conversations] * (bp - len(targets))
    start = time.perf_counter()
    self._cache = jax.block_until_ready(self._steps.copy.run(
        (self.shapes.prefill_window(slots), self._cache,
         np.array([c.row for c in sources] + pad, np.int32),
         np.array([c.row for c in targets] + pad, np.int32)),
        strict=self.strict_shapes, layout=self._layout))
    self.seconds["copy"] += time.perf_counter() - start
