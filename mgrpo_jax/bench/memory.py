"""What a training run's memory holds, per agent, from its config alone.

  python -m mgrpo_jax.bench.memory [--config=configs/smollm2.py]
      [--json=runs/bench/memory.json]

No weights are read and nothing is trained: the model's shapes come from
its config (config.json of a registered or local checkpoint; the tiny
team's from config.model), and the learner's update is compiled from
shapes alone (`Learner.update_memory`, XLA's memory analysis of the
program at its longest bucket, `learner.<agent>.max_len`). Per agent:

  weights        the learner's parameters (float32)
  adam           Adam's two moments (2 x weights)
  reference      the KL reference copy (when beta > 0 or log_ref_kl)
  sampler        the sampler's own copy of the weights (agents.sampler_dtype)
  kv_cache       keys and values of agents.<agent>.rows conversations of
                 context_tokens slots, every layer
  update_temps   the update program's temporaries: the activations the
                 backward pass keeps (every layer's attention probabilities
                 [M, H, T, T] among them), the logits [M, T, V] and their
                 gradient, the gradient accumulator
  logits         one micro-batch's float32 logits [M, T, V], for scale (it
                 is part of update_temps)

All agents in one process (`--role=both`, the default) hold the sum of the
persistent parts and, while one agent updates, that update's temporaries
(updates run one after another: the largest counts); the largest part is
named. XLA's figure is the compiler's plan for the
program's buffers; a process also holds the Python heap, JAX's runtime and
compiled programs, and host copies (a measured peak, `bench.team_runs` /
`bench.team_memory`, sits above the sum).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from absl import app
from absl import flags

from mgrpo_jax.bench.common import machine

GIB = 1024 ** 3
_BYTES = {"float32": 4, "bfloat16": 2}


def model_config(config) -> Any:
  """The ModelConfig of config.model, without reading weights."""
  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.models.hf_checkpoint import read_config
  if config.model.name == "tiny":
    from mgrpo_jax.agents.tiny_team import tiny_model_config
    from mgrpo_jax.train.team_build import agents_section
    agents = agents_section(config)
    return tiny_model_config(
        config.model.vocab_size, hidden_size=config.model.hidden_size,
        num_layers=config.model.num_layers,
        max_position_embeddings=max(agents[a].context_tokens
                                    for a in ("main", "sub")))
  from mgrpo_jax.models.loading import REGISTRY, converted_checkpoint
  name = config.model.name
  directory = (converted_checkpoint(name) if name in REGISTRY
               and not pathlib.Path(name).is_dir() else name)
  return read_config(directory)


def agent_parts(config, agent: str, model) -> dict[str, int]:
  """Bytes of each part one agent holds (module docstring)."""
  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp
  from flax import nnx
  from mgrpo_jax.models.build import expected_shapes
  from mgrpo_jax.models.decoder import Decoder
  from mgrpo_jax.train.learner import Learner
  from mgrpo_jax.train.side import learner_config
  import numpy as np
  count = sum(int(np.prod(s)) for s in expected_shapes(model).values())
  learner = learner_config(config, agent)
  section = config.agents[agent]
  abstract = Learner(agent, nnx.eval_shape(
      lambda: Decoder(model, rngs=nnx.Rngs(0))), learner,
                     temperature=config.agents.temperature)
  compiled = abstract.update_memory(1, learner.max_len)
  weights = 4 * count
  return {
      "weights": weights,
      "adam": 2 * weights,
      "reference": weights if abstract.ref_params is not None else 0,
      "sampler": _BYTES[config.agents.sampler_dtype] * count,
      "kv_cache": (2 * model.num_layers * section.rows * model.num_kv_heads
                   * section.context_tokens * model.head_dim
                   * jnp.dtype(jnp.float32).itemsize),
      "update_temps": compiled["temporaries"],
      "logits": 4 * learner.micro_batch * learner.max_len * model.vocab_size,
  }


def measure(config) -> dict[str, Any]:
  """Every agent's parts, their total, and the largest part."""
  from mgrpo_jax.agents.team import sub_kinds  # pylint: disable=g-import-not-at-top
  from mgrpo_jax.train.team_build import agents_section  # pylint: disable=g-import-not-at-top
  model = model_config(config)
  agents = ["main", *sub_kinds(agents_section(config))]
  parts = {a: agent_parts(config, a, model) for a in agents}
  # Every agent's weights, moments, copies and caches live at once; their
  # updates run one after another, so the largest update's temporaries.
  summed = {k: sum(parts[a][k] for a in agents)
            for k in parts[agents[0]] if k not in ("logits", "update_temps")}
  summed["update_temps"] = max(parts[a]["update_temps"] for a in agents)
  return {"model": config.model.name, "agents": parts,
          "total_bytes": sum(summed.values()),
          "largest": max(summed, key=summed.get),
          "by_part": summed}


def table(result: dict[str, Any]) -> str:
  agents = list(result["agents"])
  lines = ["| part | " + " | ".join(agents) + " | all agents |",
           "|---|" + "---|" * (len(agents) + 1)]
  for part in result["agents"][agents[0]]:
    values = [result["agents"][a][part] for a in agents]
    total = ("(in update_temps)" if part == "logits"
             else f"{result['by_part'][part] / GIB:.2f} GiB"
             + (" (the largest)" if part == "update_temps" else ""))
    lines.append(f"| {part} | " + " | ".join(f"{v / GIB:.2f} GiB"
                                               for v in values)
                 + f" | {total} |")
  totals = [sum(v for k, v in result["agents"][a].items() if k != "logits")
            for a in agents]  # Each agent's own, its update included.
  lines.append("| total | " + " | ".join(f"{t / GIB:.2f} GiB" for t in totals)
               + f" | {result['total_bytes'] / GIB:.2f} GiB |")
  return "\n".join(lines)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  from mgrpo_jax.runtime.config_checks import load_config_file  # pylint: disable=g-import-not-at-top
  config = load_config_file(_CONFIG.value)
  result = {"machine": machine(), "config": _CONFIG.value, **measure(config)}
  print(f"{_CONFIG.value}: memory by part ({result['machine']})")
  print(table(result))
  print(f"largest: {result['largest']}")
  if _JSON.value:
    path = pathlib.Path(_JSON.value)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
  _CONFIG = flags.DEFINE_string("config", "configs/smollm2.py",
                                "Training config file.")
  _JSON = flags.DEFINE_string("json", "", "Also write the result here.")
  app.run(main)
