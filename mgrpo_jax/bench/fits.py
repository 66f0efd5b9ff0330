"""What fits where: each agent's bytes per chip, full fine-tuning vs LoRA.

  python -m mgrpo_jax.bench.fits [--json=runs/bench/fits.json]
      [--md=launch/results/fits.md]

From the models' configs alone (no weights): SmolLM2-135M, Qwen3-1.7B,
Qwen3-8B and Qwen3-30B-A3B (the paper's model, a mixture of experts), on
TPU v5e-8/16/32 and v5p-8/32 slices and one 80 GB GPU. Two agents (main
and sub-agent, the paper's pair, each its own model): on a slice each
gets half the chips as its own mesh, its parameters sharded over them
(FSDP); on the one GPU both share it. Per agent and chip:

  full fine-tuning  float32 weights (4 B/param), Adam's two moments (8),
                    the gradient (4) and the sampler's bfloat16 copy (2)
  LoRA              the frozen float32 base (4), the sampler's bfloat16
                    merged copy (2), and rank-16 adapters on every
                    attention and MLP matrix (router and attention for the
                    mixture of experts) with their Adam moments and
                    gradient (16 B per adapter parameter)
  kv cache          the sampler's bfloat16 keys and values: 32
                    conversations of 4096 tokens

The update's activations come on top (they depend on the micro-batch and
`learner.<agent>.remat`: `python -m mgrpo_jax.bench.memory` compiles the
update for a config); "fits" leaves them 10% of the chip's memory.
"""

from __future__ import annotations

from typing import Any

from absl import app
from absl import flags

from mgrpo_jax.bench.common import write_output
from mgrpo_jax.models.config import ModelConfig

GIB = 1024 ** 3
# config.json fields of each model (their published Hugging Face configs).
_QWEN3 = dict(vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1e6,
              head_dim=128, max_position_embeddings=40960)
MODELS: dict[str, dict[str, Any]] = {
    "SmolLM2-135M": dict(model_type="llama", vocab_size=49152,
                         hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, rope_theta=100000.0,
                         rms_norm_eps=1e-5, tie_word_embeddings=True,
                         max_position_embeddings=8192),
    "Qwen3-1.7B": dict(model_type="qwen3", **_QWEN3, hidden_size=2048,
                       intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8,
                       tie_word_embeddings=True),
    "Qwen3-8B": dict(model_type="qwen3", **_QWEN3, hidden_size=4096,
                     intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8,
                     tie_word_embeddings=False),
    "Qwen3-30B-A3B": dict(model_type="qwen3_moe", **_QWEN3, hidden_size=2048,
                          intermediate_size=6144, num_hidden_layers=48,
                          num_attention_heads=32, num_key_value_heads=4,
                          tie_word_embeddings=False, num_experts=128,
                          num_experts_per_tok=8, moe_intermediate_size=768,
                          norm_topk_prob=True),
}
# (name, chips, GiB of memory per chip, agents share the chips).
HARDWARE = (("v5e-8", 8, 16, False), ("v5e-16", 16, 16, False),
            ("v5e-32", 32, 16, False), ("v5p-8", 4, 95, False),
            ("v5p-32", 16, 95, False), ("1 GPU, 80 GB", 1, 80 * 1e9 / GIB,
                                        True))
LORA_RANK, ROWS, CONTEXT, HEADROOM = 16, 32, 4096, 0.9


def lora_params(config: ModelConfig, rank: int = LORA_RANK) -> int:
  """Adapter parameters on every adaptable matrix (models/lora.py)."""
  d, h, g, dh = (config.hidden_size, config.num_heads, config.num_kv_heads,
                 config.head_dim)
  shapes = [(d, h * dh), (d, g * dh), (d, g * dh), (h * dh, d)]
  if config.num_experts:
    shapes.append((d, config.num_experts))
  else:
    f = config.intermediate_size
    shapes += [(d, f), (d, f), (f, d)]
  return config.num_layers * rank * sum(i + o for i, o in shapes)


def agent_bytes(config: ModelConfig) -> dict[str, float]:
  """One agent's bytes (whole, before sharding) by part and mode."""
  n = config.num_params
  kv = (2 * config.num_layers * ROWS * CONTEXT * config.num_kv_heads
        * config.head_dim * 2)
  return {"params": n, "full": 18 * n, "lora": 6 * n + 16 * lora_params(
      config), "kv_cache": kv}


def table_rows() -> list[dict[str, Any]]:
  rows = []
  for model, hf in MODELS.items():
    config = ModelConfig.from_hf(hf, source=model)
    parts = agent_bytes(config)
    for hardware, chips, gib, shared in HARDWARE:
      per_agent = chips if shared else chips // 2  # Each agent's mesh.
      agents_per_chip = 2 if shared else 1
      row = {"model": model, "params": parts["params"],
             "hardware": hardware, "chips_per_agent": per_agent,
             "chip_gib": gib}
      for mode in ("full", "lora"):
        per_chip = agents_per_chip * (parts[mode] + parts["kv_cache"]) / (
            per_agent * GIB)
        row[f"{mode}_gib_per_chip"] = per_chip
        row[f"{mode}_fits"] = per_chip <= HEADROOM * gib
      rows.append(row)
  return rows


def smallest(rows: list[dict[str, Any]], model: str, mode: str) -> str:
  """The first hardware of HARDWARE (smallest to largest slice of each
  kind) on which `model`'s pair fits in `mode`."""
  for r in rows:
    if r["model"] == model and r[f"{mode}_fits"]:
      return r["hardware"]
  return "none listed"


def table(rows: list[dict[str, Any]]) -> str:
  """One row per model, one column per hardware: GiB per chip of full
  fine-tuning / LoRA ("(no)": more than 90% of the chip's memory)."""
  hardware = [h for h, *_ in HARDWARE]
  chip = {h: gib for h, _, gib, _ in HARDWARE}
  lines = ["| GiB per chip, full fine-tuning / LoRA | " + " | ".join(
      f"{h} ({chip[h]:.0f} GiB)" for h in hardware) + " |",
           "|---|" + "---|" * len(hardware)]
  for model in MODELS:
    mine = {r["hardware"]: r for r in rows if r["model"] == model}
    cell = lambda r, mode: (f"{r[f'{mode}_gib_per_chip']:.1f}"
                            + ("" if r[f"{mode}_fits"] else " (no)"))
    params = next(iter(mine.values()))["params"]
    lines.append(f"| {model} ({params / 1e9:.2f}B) | " + " | ".join(
        f"{cell(mine[h], 'full')} / {cell(mine[h], 'lora')}"
        for h in hardware) + " |")
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  rows = table_rows()
  print("Two agents' bytes per chip (bench/fits.py's docstring: what is "
        "counted)")
  print(table(rows))
  pair = {mode: smallest(rows, "Qwen3-30B-A3B", mode)
          for mode in ("full", "lora")}
  print(f"The paper's pair (two Qwen3-30B-A3B agents) fits first on: full "
        f"fine-tuning {pair['full']}, LoRA {pair['lora']}")
  write_output(_MD.value, table(rows) + "\n")
  write_output(_JSON.value, {"rows": rows, "paper_pair": pair})


if __name__ == "__main__":
  _JSON = flags.DEFINE_string("json", "runs/bench/fits.json",
                              "Where to write the rows ('': nowhere).")
  _MD = flags.DEFINE_string("md", "", "Where to write the table as markdown "
                            "(launch/results/fits.md is README's).")
  app.run(main)
