"""Loading a trained agent from a run's Orbax checkpoints (for evaluation).

A run's checkpoints (runtime/checkpoints.py) hold parameters and optimizer
state, not the architecture. The trainer therefore writes a model card once
per run, next to the agents' checkpoint directories:

  <run_dir>/checkpoints/model/   config.json (Hugging Face style) and the
                                 tokenizer files, the same for every agent
  <run_dir>/checkpoints/<agent>/<step>/   Orbax checkpoints

`load_trained("<run_dir>/checkpoints/main")` reads the newest step (or
`.../main/<step>` that one): it builds the model from the card and restores
only the parameters, straight onto `mesh` when given. This is what
`python -m mgrpo_jax.evaluate --checkpoint <run_dir>/checkpoints/main` uses;
a run_dir may be local or gs:// (runtime/run_files.py).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from mgrpo_jax.models import sharding as sharding_lib
from mgrpo_jax.models.config import ModelConfig
from mgrpo_jax.models.decoder import Decoder
from mgrpo_jax.models.hf_checkpoint import CONFIG_FILE, hf_config, read_config
from mgrpo_jax.models.tokenizer import Tokenizer
from mgrpo_jax.runtime import run_files

CARD_DIR = "model"  # Beside the agents' directories.
LORA_FILE = "lora.json"  # In the card: the agents that trained adapters.


def write_model_card(checkpoint_dir: str | pathlib.Path,
                     config: ModelConfig, tokenizer: Tokenizer,
                     lora_ranks: dict[str, int] | None = None) -> None:
  """Writes <checkpoint_dir>/model (config.json + tokenizer, and
  `lora_ranks`: the agents whose checkpoints hold LoRA adapters) once,
  local or gs:// (runtime/run_files.py)."""
  if run_files.is_remote(checkpoint_dir):
    import tempfile  # pylint: disable=g-import-not-at-top
    card = run_files.path_of(checkpoint_dir) / CARD_DIR
    if (card / CONFIG_FILE).exists():
      return
    with tempfile.TemporaryDirectory() as local:
      write_model_card(local, config, tokenizer, lora_ranks)
      card.mkdir(parents=True, exist_ok=True)
      files = sorted(pathlib.Path(local, CARD_DIR).iterdir(),
                     key=lambda f: f.name == CONFIG_FILE)  # config.json last.
      for f in files:
        (card / f.name).write_bytes(f.read_bytes())
    return
  card = pathlib.Path(checkpoint_dir) / CARD_DIR
  if (card / CONFIG_FILE).is_file():
    return
  card.mkdir(parents=True, exist_ok=True)
  tokenizer.save(card)
  if lora_ranks:
    (card / LORA_FILE).write_text(json.dumps(lora_ranks) + "\n",
                                  encoding="utf-8")
  hf = hf_config(config, tokenizer)
  tmp = card / (CONFIG_FILE + ".tmp")
  tmp.write_text(json.dumps(hf, indent=2) + "\n", encoding="utf-8")
  tmp.rename(card / CONFIG_FILE)  # Last: a card with config.json is whole.


def split_step(path: str | pathlib.Path) -> tuple[epath.Path, int | None]:
  """(<run>/checkpoints/<agent>, step or None) of an agent[/<step>] path,
  local or gs://."""
  path = run_files.path_of(path)
  if path.name.isdigit():
    return path.parent, int(path.name)
  return path, None


def is_trained_checkpoint(path: str | pathlib.Path) -> bool:
  """Whether `path` is <run>/checkpoints/<agent>[/<step>] of a run."""
  agent_dir, _ = split_step(path)
  return agent_dir.is_dir() and (
      agent_dir.parent / CARD_DIR / CONFIG_FILE).is_file()


def load_trained(path: str | pathlib.Path, *, mesh: Mesh | None = None
                 ) -> tuple[Decoder, Tokenizer, int]:
  """(model, tokenizer, step) from <run>/checkpoints/<agent>[/<step>]."""
  agent_dir, step = split_step(path)
  card = agent_dir.parent / CARD_DIR
  if not (card / CONFIG_FILE).is_file():
    raise FileNotFoundError(
        f"{str(path)!r}: expected <run_dir>/checkpoints/<agent>[/<step>] of "
        f"a training run, with the run's model card in {str(card)!r} "
        "(written by python -m mgrpo_jax.main).")
  lora_file = card / LORA_FILE
  ranks = json.loads(lora_file.read_text()) if lora_file.exists() else {}
  if agent_dir.name in ranks:
    raise ValueError(
        f"{str(path)!r}: the {agent_dir.name} agent trained LoRA adapters "
        f"(rank {ranks[agent_dir.name]}), so its checkpoints hold the "
        "adapters only; evaluating them on their base is not supported yet. "
        "The run's own evaluations (metrics.jsonl, outcomes.jsonl) used the "
        "adapted model.")
  config, tokenizer = _read_card(card)
  manager = ocp.CheckpointManager(
      agent_dir,
      options=ocp.CheckpointManagerOptions(read_only=True))
  try:
    steps = sorted(manager.all_steps())
    if not steps:
      raise FileNotFoundError(f"{str(agent_dir)!r} holds no complete "
                              "checkpoint step.")
    if step is None:
      step = steps[-1]
    elif step not in steps:
      raise FileNotFoundError(f"{str(path)!r}: step {step} is not a complete "
                              f"checkpoint; saved steps: {steps}.")
    graphdef, target = _abstract_params(config, mesh)
    out = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.PyTreeRestore(
            {"params": target}, partial_restore=True,
            restore_args=ocp.checkpoint_utils.construct_restore_args(
                {"params": target}))))
  finally:
    manager.close()
  return nnx.merge(graphdef, out.state["params"]), tokenizer, step


def _read_card(card: epath.Path) -> tuple[ModelConfig, Tokenizer]:
  """The model card's config and tokenizer; a gs:// card is copied into a
  temporary folder first (its few small files)."""
  if not run_files.is_remote(card):
    return read_config(card), Tokenizer.load(card)
  import tempfile  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as local:
    for f in card.iterdir():
      if f.is_file():
        (pathlib.Path(local) / f.name).write_bytes(f.read_bytes())
    return read_config(local), Tokenizer.load(local)


def _abstract_params(config: ModelConfig, mesh: Mesh | None
                     ) -> tuple[nnx.GraphDef, Any]:
  """The model's graph and its parameters as ShapeDtypeStructs placed on
  `mesh` (or on the first device)."""
  abstract = nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))
  graphdef, state = nnx.split(abstract)
  if mesh is None:
    mesh = Mesh(jax.devices()[:1], ("fsdp",))
    shardings = jax.tree.map(
        lambda _: NamedSharding(mesh, PartitionSpec()), state)
    return graphdef, jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        state, shardings)
  shardings = sharding_lib.state_shardings(state, mesh)  # One per Variable.

  def place(sharding, variable):
    return variable.replace(jax.ShapeDtypeStruct(
        variable.shape, variable.dtype, sharding=sharding))

  return graphdef, jax.tree.map(place, shardings, state)
