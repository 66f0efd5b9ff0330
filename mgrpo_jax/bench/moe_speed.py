"""A small mixture of experts against the dense model of equal active size.

  python -m mgrpo_jax.bench.moe_speed [--json=runs/bench/moe_speed.json]
      [--md=launch/results/moe_speed.md]

A Qwen3-MoE decoder (E experts of width Fe, K per token) and a dense
Qwen3 of MLP width K x Fe (the same parameters active per token, the same
attention): a training step (forward + backward, `bench.train_step`) and
the sampler's tokens per second (`bench.speed.ours_generate`), medians of
`--repeats`, compilation excluded. The MoE runs with its grouped matmuls
("blocks": each expert multiplies only its rows) and with every expert
computed for every row (jax.lax.ragged_dot's CPU fallback, "ragged_dot"):
the target is that the grouped one is not slower than every expert.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from absl import app
from absl import flags
import numpy as np

from mgrpo_jax.bench.common import machine, write_output
from mgrpo_jax.models.config import ModelConfig

EXPERTS, PER_TOKEN, EXPERT_WIDTH = 16, 2, 256


def configs(layers: int = 4, width: int = 512) -> dict[str, ModelConfig]:
  common = dict(vocab_size=8192, hidden_size=width, num_layers=layers,
                num_heads=8, num_kv_heads=4, head_dim=width // 8,
                rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False,
                qk_norm=True, max_position_embeddings=2048)
  return {
      "moe": ModelConfig(family="qwen3_moe", intermediate_size=1,
                         num_experts=EXPERTS, experts_per_token=PER_TOKEN,
                         moe_intermediate_size=EXPERT_WIDTH,
                         norm_topk_prob=True, **common),
      "dense": ModelConfig(family="qwen3",
                           intermediate_size=PER_TOKEN * EXPERT_WIDTH,
                           **common)}


def measure(*, batch: int = 4, length: int = 256, new_tokens: int = 64,
            repeats: int = 3, layers: int = 4, width: int = 512
            ) -> dict[str, Any]:
  # pylint: disable=g-import-not-at-top
  from unittest import mock
  from mgrpo_jax.bench.speed import ours_generate
  from mgrpo_jax.bench.train_step import jax_train_step_seconds
  from mgrpo_jax.models import build, moe
  from mgrpo_jax.sampling import Engine, steps
  rng = np.random.default_rng(0)
  out: dict[str, Any] = {}
  variants = [("dense", None), ("moe", "blocks"), ("moe", "ragged_dot")]
  for name, impl in variants:
    config = configs(layers, width)[name]
    label = name if impl is None else f"{name} ({impl})"
    with mock.patch.object(moe, "default_impl", lambda i=impl: i or "blocks"):
      model = build.init_model(config, seed=0)
      tokens = rng.integers(0, config.vocab_size, (batch, length + 1))
      step = jax_train_step_seconds(model, tokens, repeats=repeats)
      engine = Engine(model, max_conversations=batch,
                      cache_len=64 + new_tokens + 16)
      prompts = [rng.integers(0, config.vocab_size, 64).tolist()
                 for _ in range(batch)]
      sampler, _ = ours_generate(engine, prompts, new_tokens, repeats)
    # The engine's programs are kept per model structure: the next variant
    # (the same structure, another matmul) compiles its own.
    steps.compiled_steps.cache_clear()
    out[label] = {"params": config.num_params,
                  "train_step_seconds": step["seconds"],
                  "sampler_tokens_per_second": sampler["tokens_per_second"]}
  out["settings"] = dict(batch=batch, length=length, new_tokens=new_tokens,
                         repeats=repeats, layers=layers, width=width,
                         experts=EXPERTS, per_token=PER_TOKEN,
                         expert_width=EXPERT_WIDTH)
  return out


def table(result: dict[str, Any]) -> str:
  lines = ["| model | parameters | train step s | sampler tokens/s |",
           "|---|---|---|---|"]
  for label, r in result.items():
    if label == "settings":
      continue
    lines.append(f"| {label} | {r['params'] / 1e6:.1f}M | "
                 f"{r['train_step_seconds']:.3f} | "
                 f"{r['sampler_tokens_per_second']:.1f} |")
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  from mgrpo_jax.models.loading import enable_compilation_cache  # pylint: disable=g-import-not-at-top
  enable_compilation_cache()
  result = {"machine": machine(), **measure(repeats=_REPEATS.value)}
  text = report(result)
  print(text)
  write_output(_JSON.value, result)
  write_output(_MD.value, text + "\n")


def report(result: dict[str, Any]) -> str:
  """The printed (and --md) report of a `measure` result with its machine."""
  return (f"mixture of experts vs dense of equal active size "
          f"({result['machine']}; `python -m mgrpo_jax.bench.moe_speed`)\n"
          + table({k: v for k, v in result.items() if k != "machine"}))


if __name__ == "__main__":
  _JSON = flags.DEFINE_string("json", "runs/bench/moe_speed.json",
                              "Where to write the results ('': nowhere).")
  _MD = flags.DEFINE_string("md", "", "Where to write the report as "
                            "markdown ('': nowhere).")
  _REPEATS = flags.DEFINE_integer("repeats", 3, "Timed repeats (median).")
  app.run(main)
