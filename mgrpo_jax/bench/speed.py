"""Speed of our sampler against HF generate and Tunix, and of our train step
against PyTorch, in one run.

  python -m mgrpo_jax.bench.speed [--batches=8,32] [--json=runs/speed.json]

Every side uses the default model (SmolLM2-135M-Instruct, float32, the same
weights: transformers reads our converted cache directory) on this machine's
CPU. Generation: the same random prompts of --prompt_len tokens, exactly
--new_tokens sampled tokens per row (temperature 1, no top-k / top-p on
any side), ours through `sampling.Engine`, Hugging Face's through
`generate`, Tunix's through its `Sampler` (bench/tunix_sampler.py; its
greedy tokens are checked equal to HF's before it is timed, and where it is
not installed or differs its column says why).
Training: one forward + backward of a next-token loss over a [B, T] batch.
Ours runs twice: with float32 weights (the learner's own numbers), and with
the sampler's bfloat16 weights option (`Engine(weights_dtype="bfloat16")`,
`agents.sampler_dtype`), whose row gives its log-prob gap to the float32
model (`sampling.precision.logp_gap`). The peers run in float32.
Compilation and warm-up are excluded and reported separately. torch and
transformers' PyTorch path are benchmark-only dependencies (the test extra).
"""

from __future__ import annotations

import json
import pathlib
import statistics
import time

import jax
import numpy as np
from absl import app
from absl import flags
from absl import logging

from mgrpo_jax.bench import train_step
from mgrpo_jax.bench import tunix_sampler
from mgrpo_jax.bench.common import machine
from mgrpo_jax.runtime import logs
from mgrpo_jax.models import loading
from mgrpo_jax.sampling import Engine, SamplingParams, precision

def _median_seconds(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def ours_generate(engine: Engine, prompts: list[list[int]], new_tokens: int,
                  repeats: int) -> tuple[dict[str, float], list]:
  """Our engine's figures, and the untimed first call's results (temperature
  1, key 0), whose log-probs give the bfloat16 option's gap."""
  params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens)
  start = time.perf_counter()
  out = engine.generate(prompts, params, jax.random.key(0))  # compiles
  warmup = time.perf_counter() - start
  assert all(len(r.tokens) == new_tokens for r in out)
  seconds = _median_seconds(
      lambda: engine.generate(prompts, params, jax.random.key(1)), repeats)
  return {"seconds": seconds, "warmup_seconds": warmup,
          "tokens_per_second": len(prompts) * new_tokens / seconds}, out


def torch_generate(hf_model, prompts: list[list[int]], new_tokens: int,
                   repeats: int) -> dict[str, float]:
  import torch  # benchmark-only dependency

  ids = torch.tensor(prompts, dtype=torch.long)
  mask = torch.ones_like(ids)

  def run():
    with torch.no_grad():
      out = hf_model.generate(
          input_ids=ids, attention_mask=mask, do_sample=True,
          temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
          min_new_tokens=new_tokens, pad_token_id=0)
    assert out.shape[1] == ids.shape[1] + new_tokens

  start = time.perf_counter()
  run()
  warmup = time.perf_counter() - start
  seconds = _median_seconds(run, repeats)
  return {"seconds": seconds, "warmup_seconds": warmup,
          "tokens_per_second": len(prompts) * new_tokens / seconds}


def tunix_peer(hf_dir, hf_model, vocab_size: int, rng: np.random.Generator):
  """(Tunix handle, None) when Tunix runs and its greedy tokens equal HF's
  on two short prompts; else (None, the reason its column shows)."""
  import torch  # benchmark-only dependency

  reason = tunix_sampler.available()
  if reason is not None:
    return None, reason
  try:
    handle = tunix_sampler.load(hf_dir)
    prompts = rng.integers(32, vocab_size, (2, 16)).tolist()
    theirs = tunix_sampler.generate(handle, prompts, 8, greedy=True, seed=0)
    with torch.no_grad():
      want = hf_model.generate(torch.tensor(prompts), do_sample=False,
                               max_new_tokens=8, min_new_tokens=8,
                               pad_token_id=0)[:, 16:].numpy()
  except Exception as e:  # pylint: disable=broad-except
    return None, f"Tunix failed: {type(e).__name__}: {e}"[:200]
  if not np.array_equal(theirs, want):
    return None, "Tunix's greedy tokens differ from HF's: not timed"
  return handle, None


def _define_flags() -> None:
  """The command line's flags, defined only when this module runs as a
  program (so tests can import it beside other benchmarks' flags)."""
  global _BATCHES, _PROMPT_LEN, _NEW_TOKENS, _REPEATS, _TRAIN_SHAPE, _JSON
  global _MODEL
  _BATCHES = flags.DEFINE_list("batches", ["8", "32"],
                               "Generation batch sizes.")
  _PROMPT_LEN = flags.DEFINE_integer("prompt_len", 128,
                                     "Prompt tokens per row.")
  _NEW_TOKENS = flags.DEFINE_integer("new_tokens", 128,
                                     "New tokens per row.")
  _REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs per measurement "
                                  "(the median is reported).")
  _TRAIN_SHAPE = flags.DEFINE_list("train_shape", ["4", "128"],
                                   "Train step batch B and length T.")
  _JSON = flags.DEFINE_string("json", "runs/bench_speed.json",
                              "Where to write the results as JSON.")
  _MODEL = flags.DEFINE_string("model", "smollm2-135m-instruct",
                               "Model name or Hugging Face directory.")


def main(argv):
  del argv
  logs.configure()  # Library INFO lines only with --verbosity=1.
  import torch  # benchmark-only dependency
  import transformers

  model, tokenizer = loading.load_model(_MODEL.value)
  hf_dir = (loading.converted_checkpoint(_MODEL.value)
            if _MODEL.value in loading.REGISTRY else _MODEL.value)
  hf_model = transformers.AutoModelForCausalLM.from_pretrained(
      hf_dir, dtype=torch.float32)
  hf_model.eval()
  rng = np.random.default_rng(0)
  tunix, why_not = tunix_peer(hf_dir, hf_model, model.config.vocab_size,
                              np.random.default_rng(1))
  low = 32  # skip special tokens at the start of the vocabulary
  results = {"machine": machine(), "jax": jax.__version__,
             "tunix": tunix_sampler.VERSION if tunix else None,
             "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
             "model": _MODEL.value, "generate": [], "train_step": None}
  for batch in map(int, _BATCHES.value):
    prompts = rng.integers(low, model.config.vocab_size,
                           (batch, _PROMPT_LEN.value)).tolist()
    cache_len = _PROMPT_LEN.value + _NEW_TOKENS.value
    engine = Engine(model, max_conversations=batch, cache_len=cache_len)
    ours, _ = ours_generate(engine, prompts, _NEW_TOKENS.value,
                            _REPEATS.value)
    del engine
    engine = Engine(model, max_conversations=batch, cache_len=cache_len,
                    weights_dtype="bfloat16")
    rounded, samples = ours_generate(engine, prompts, _NEW_TOKENS.value,
                                     _REPEATS.value)
    # The gap of its samples to the float32 model's scores of the same tokens.
    rounded["logp_gap"] = precision.logp_gap(model, prompts, samples)
    del engine
    theirs = torch_generate(hf_model, prompts, _NEW_TOKENS.value,
                            _REPEATS.value)
    google = (tunix_sampler.tokens_per_second(
        tunix, prompts, _NEW_TOKENS.value, _REPEATS.value) if tunix
              else {"unavailable": why_not})
    row = {"batch": batch, "ours": ours, "ours_bfloat16": rounded,
           "torch": theirs, "tunix": google,
           "speedup": ours["tokens_per_second"] / theirs["tokens_per_second"],
           "speedup_bfloat16": (rounded["tokens_per_second"]
                                / theirs["tokens_per_second"])}
    if tunix:
      row["speedup_tunix"] = (ours["tokens_per_second"]
                              / google["tokens_per_second"])
      row["speedup_bfloat16_tunix"] = (rounded["tokens_per_second"]
                                       / google["tokens_per_second"])
    logging.info("generate batch %d: %s", batch, row)
    results["generate"].append(row)
  b, t = map(int, _TRAIN_SHAPE.value)
  tokens = rng.integers(low, model.config.vocab_size, (b, t + 1))
  ours = train_step.jax_train_step_seconds(model, tokens, _REPEATS.value + 1)
  theirs = train_step.torch_train_step_seconds(hf_model, tokens,
                                               _REPEATS.value + 1)
  results["train_step"] = {"batch": b, "length": t, "ours": ours,
                           "torch": theirs,
                           "speedup": theirs["seconds"] / ours["seconds"]}

  lines = [f"machine: {results['machine']}; jax {results['jax']}, torch "
           f"{results['torch']} ({results['torch_threads']} threads)",
           "| measurement | ours | PyTorch | ours / PyTorch | Tunix | "
           "ours / Tunix |", "|---|---|---|---|---|---|"]
  for row in results["generate"]:
    google = row["tunix"]
    lines.append(
        f"| generate, batch {row['batch']}, {_PROMPT_LEN.value} prompt + "
        f"{_NEW_TOKENS.value} new tokens (tokens/s) | "
        f"{row['ours']['tokens_per_second']:.1f} | "
        f"{row['torch']['tokens_per_second']:.1f} | {row['speedup']:.2f}x | "
        + (f"{google['tokens_per_second']:.1f} | "
           f"{row['speedup_tunix']:.2f}x |" if "speedup_tunix" in row
           else f"{google['unavailable']} | - |"))
    rounded, gap = row["ours_bfloat16"], row["ours_bfloat16"]["logp_gap"]
    lines.append(
        f"| same, ours with bfloat16 weights (log-prob gap to float32: mean "
        f"{gap['mean_abs']:.3f}, max {gap['max_abs']:.3f}) | "
        f"{rounded['tokens_per_second']:.1f} | "
        f"{row['torch']['tokens_per_second']:.1f} | "
        f"{row['speedup_bfloat16']:.2f}x | "
        + (f"{google['tokens_per_second']:.1f} | "
           f"{row['speedup_bfloat16_tunix']:.2f}x |"
           if "speedup_bfloat16_tunix" in row else "- | - |"))
  ts = results["train_step"]
  lines.append(f"| train step fwd+bwd, [{b}, {t}] (seconds) | "
               f"{ts['ours']['seconds']:.2f} | {ts['torch']['seconds']:.2f} | "
               f"{ts['speedup']:.2f}x | - | - |")
  print("\n".join(lines))
  path = pathlib.Path(_JSON.value)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(results, indent=1))
  print(f"wrote {path}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
