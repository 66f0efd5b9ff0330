"""One process of tests/distributed_test.py's two-process runs.

  python tests/distributed_worker.py COORDINATOR NUM_PROCESSES PROCESS_ID OUT

joins the JAX distributed system at COORDINATOR (runtime/distributed.py,
CPU collectives over gloo), builds one agent's mesh over the devices of
every process (runtime/meshes.py), trains a tiny model there for `STEPS`
learner steps (train/learner.py) and writes OUT/process_<id>.json (figures,
the mesh, the errors of meshes no process may build) and, from process 0,
OUT/params.npz (every parameter, gathered from all processes).

  python tests/distributed_worker.py one DEVICES OUT

does the same in one process on DEVICES local CPU devices (the reference),
writing OUT/one.json and OUT/one.npz.
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

STEPS = 2  # Learner steps: the second one uses Adam's state of the first.
ROWS = 8  # Trajectories per step; one micro-batch, split over the mesh.


def trajectories(step: int):
  """Token ids, loss masks and advantages of one step's ROWS trajectories
  (the same in every process: they derive from the step only)."""
  rng = np.random.default_rng(step)
  tokens, masks = [], []
  for i in range(ROWS):
    length = 10 + 3 * i
    tokens.append(rng.integers(0, 300, length).astype(np.int32))
    mask = np.zeros(length, bool)
    mask[5:] = True  # A 5-id prompt, then generated ids.
    masks.append(mask)
  adv = rng.normal(size=ROWS).astype(np.float32)
  return tokens, masks, adv


def train_tiny(mesh):
  """A tiny model trained STEPS steps on `mesh`: (learner, figures of each
  step)."""
  from model_test_utils import tiny_config
  from trainer_test_utils import learner_config
  from mgrpo_jax.models import build
  from mgrpo_jax.train.learner import Learner
  from mgrpo_jax.train.packing import pack
  model = build.init_model(tiny_config(), seed=0, mesh=mesh)
  learner = Learner("main", model, learner_config(
      learning_rate=1e-2, micro_batch=ROWS, min_len=8, max_len=64), mesh)
  figures = []
  for step in range(STEPS):
    tokens, masks, adv = trajectories(step)
    figures.append(learner.step(pack(tokens, masks, adv, micro_batch=ROWS,
                                     min_len=8, max_len=64)))
  return learner, figures


def flat_params(params) -> dict[str, np.ndarray]:
  """Parameter path -> host array (gathered from every process)."""
  import jax
  from jax.experimental import multihost_utils
  gathered = multihost_utils.process_allgather(params, tiled=True)
  return {jax.tree_util.keystr(path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_leaves_with_path(gathered)}


def _mesh_error(mesh_config) -> str:
  from mgrpo_jax.runtime import meshes
  from mgrpo_jax.runtime.config_checks import ConfigError
  try:
    meshes.agent_meshes(mesh_config)
  except ConfigError as e:
    return str(e)
  return ""


def one_process(devices: str, out: str) -> None:
  import jax
  jax.config.update("jax_num_cpu_devices", int(devices))
  from mgrpo_jax.runtime import meshes
  import ml_collections
  mesh = meshes.agent_meshes(ml_collections.ConfigDict(
      {"share": False, "main": meshes.agent_config(int(devices))}))["main"]
  learner, figures = train_tiny(mesh)
  out_dir = pathlib.Path(out)
  np.savez(out_dir / "one.npz", **flat_params(learner.params))
  (out_dir / "one.json").write_text(json.dumps({"figures": figures}))


def main(coordinator: str, num_processes: str, process_id: str,
         out: str) -> None:
  from mgrpo_jax.runtime import distributed
  distributed.initialize("explicit", coordinator, int(num_processes),
                         int(process_id))
  import jax
  import ml_collections
  from mgrpo_jax.runtime import meshes

  def mesh_section(share=False, **devices):
    return ml_collections.ConfigDict(
        {"share": share, **{name: meshes.agent_config(count)
                            for name, count in devices.items()}})

  # One agent's mesh over both processes' devices.
  mesh = meshes.agent_meshes(mesh_section(main=jax.device_count()))["main"]
  learner, figures = train_tiny(mesh)
  result = {
      "describe": distributed.describe(),
      "process_index": jax.process_index(),
      "mesh_processes": sorted({d.process_index for d in mesh.devices.flat}),
      "mesh_shape": dict(mesh.shape),
      "figures": figures,
      # More devices than the processes have together.
      "too_many": _mesh_error(mesh_section(main=jax.device_count() + 1)),
      # Disjoint slices: main on process 0's device, sub on process 1's.
      "one_process": _mesh_error(mesh_section(main=1, sub=1)),
  }
  params = flat_params(learner.params)  # Every process takes part.
  out_dir = pathlib.Path(out)
  if jax.process_index() == 0:
    np.savez(out_dir / "params.npz", **params)
  (out_dir / f"process_{jax.process_index()}.json").write_text(
      json.dumps(result))


if __name__ == "__main__":
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
  if sys.argv[1] == "one":
    one_process(*sys.argv[2:])
  else:
    main(*sys.argv[1:])
