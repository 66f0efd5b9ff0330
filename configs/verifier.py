"""M-GRPO with two sub-agent kinds: a searcher ("sub") and a verifier.

The default run (configs/default.py) plus a second kind of sub-agent: the
main agent may call `verify(claim)`, which opens a verifier conversation
(its own model, learner, mesh and store channel; `agents.verifier.*`,
`learner.verifier`, `mesh.verifier`, `align.verifier_d_max`). Every kind's
reward is tied to the main agent's outcome (hierarchical credit), each is
aligned to its own D_max and gets its own group-relative advantages.

  python -m mgrpo_jax.main --config configs/verifier.py

Both kinds start from the same warm start (the oracle demonstrates the
searcher's protocol, which the verifier shares: search, visit, report).
"""

import pathlib

import ml_collections

from mgrpo_jax.runtime.config_checks import load_config_file


def get_config() -> ml_collections.ConfigDict:
  path = pathlib.Path(__file__).with_name("default.py")
  config = load_config_file(str(path))
  config.run_dir = "runs/verifier"  # Metrics, checkpoints and (default) the store.
  config.agents.sub_kinds = ("sub", "verifier")  # A searcher and a verifier, each its own model.
  return config
