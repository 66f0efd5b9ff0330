"""Every device layout README documents trains as one device does, on closed
and on open shapes.

A short training run of the tiny team (warm-started far enough that both
agents get informative groups and real updates) is made for each layout in
`LAYOUTS`, each with `runtime.shapes` closed (strict: nothing may compile
after start-up) and open, and compared with the one-device run of the same
model and shapes: figures that are exact on one device (rewards,
accuracies, token counts, evaluations) are equal, losses and gradient
norms within 1e-4 relative. A tensor-parallel split changes the order of
the sums inside each matmul and an expert split the order of routing's
gathers: for those the runs must complete, and the teacher-forced
log-probs and the loss of one update on a fixed batch are compared within
float32 tolerance (`test_a_split_learner_scores_and_updates_as_one_device`).

Each run is its own `python -m mgrpo_jax.main` process on 8 CPU devices,
and every run reads one warm start (the SFT is cached and its key leaves
the mesh fields out), so layouts differ only where they compute. The whole
matrix is minutes: it runs in the slow run (MGRPO_JAX_SLOW=1); the default
run keeps README's TPU VM form (4 + 4 of 8 devices, closed) against one
device, and the multi-device closed engines of sampling_shapes_test.py.
"""

import pathlib

import jax
import numpy as np
import pytest

from mgrpo_jax.runtime.metrics import MetricsWriter
from trainer_test_utils import (by_step, run_child, small_closed_set,
                                tiny_config)

# Layout name -> (model family, config overrides).
LAYOUTS = {
    "one_device": ("dense", {}),
    "share_2": ("dense", {"mesh.share": True, "mesh.main.devices": 2,
                          "mesh.sub.devices": 2}),
    "share_4": ("dense", {"mesh.share": True, "mesh.main.devices": 4,
                          "mesh.sub.devices": 4}),
    # README's "One TPU VM" form: 4 + 4 of 8 devices, each agent its own.
    "tpu_vm_4_4": ("dense", {"mesh.share": False, "mesh.main.devices": 4,
                             "mesh.sub.devices": 4}),
    "fsdp2_tp2": ("dense", {"mesh.share": True, "mesh.main.devices": 4,
                            "mesh.main.shape": "fsdp:2,tp:2",
                            "mesh.sub.devices": 4,
                            "mesh.sub.shape": "fsdp:2,tp:2"}),
    # 8 experts, 2 per device of the 4-way data axis.
    "moe_experts_4": ("moe", {"mesh.share": True, "mesh.main.devices": 4,
                              "mesh.sub.devices": 4}),
    "lora_2": ("lora", {"mesh.share": True, "mesh.main.devices": 2,
                        "mesh.sub.devices": 2}),
}
# Layouts whose runs are compared figure by figure (the others: see the
# module docstring).
EXACT_LAYOUTS = ("share_2", "share_4", "tpu_vm_4_4", "lora_2")
# Learner figures that add floats in another order on another layout.
FLOAT_FIGURES = ("loss", "pg_loss", "grad_norm", "approx_kl", "ref_kl",
                 "ratio_mean", "is_weight_mean", "behaviour_logp_gap_max",
                 "router_aux_loss", "expert_load_max")
# Differ by layout by design: checksums of weights updated in another order,
# the start-up's program counts (agents on separate devices share none).
SKIPPED = ("weights/", "startup/", "sft/cached")
STEPS = 2


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
  """One MGRPO_JAX_CACHE (tokenizer, warm starts) for every run here, and
  the runs made so far by (family, layout, shapes)."""
  cache = tmp_path_factory.mktemp("cache")
  with pytest.MonkeyPatch.context() as patch:
    patch.setenv("MGRPO_JAX_CACHE", str(cache))
    yield {"cache": cache, "dir": tmp_path_factory.mktemp("runs"), "runs": {}}


def _moe_checkpoint(config, directory: pathlib.Path) -> str:
  """A tiny Qwen3-MoE checkpoint with the tiny team's tokenizer, as a user
  would point `model.name` at (8 experts, 2 per token)."""
  if not (directory / "config.json").is_file():
    from mgrpo_jax.agents import tiny_team
    from mgrpo_jax.data.world import WorldConfig
    from mgrpo_jax.models import build
    from mgrpo_jax.models.config import ModelConfig
    from mgrpo_jax.models.hf_checkpoint import save_hf_checkpoint
    tok, dense = tiny_team.tiny_team_assets(
        WorldConfig(**config.world.to_dict()),
        vocab_size=config.model.vocab_size, hidden_size=32, num_layers=1,
        max_position_embeddings=1024)
    moe = ModelConfig(**{
        **dense.__dict__, "family": "qwen3_moe", "qk_norm": True,
        "num_experts": 8, "experts_per_token": 2, "moe_intermediate_size": 32,
        "norm_topk_prob": True, "tie_word_embeddings": False})
    save_hf_checkpoint(build.init_model(moe, seed=0), tok, directory)
  return str(directory)


def layout_config(shared, family: str, overrides: dict, shapes: str,
                  name: str):
  """The tiny team of `family` ("dense", "moe", "lora") on a layout."""
  config = tiny_config(shared["dir"] / name, steps=STEPS)
  # Far enough that rollouts differ in reward: both agents update.
  config.sft.steps = 150
  config.sft.questions = 8
  config.train.group_size = 4
  config.train.eval_every = STEPS
  if family == "moe":
    config.model.name = _moe_checkpoint(config, shared["cache"] / "moe")
  if family == "lora":
    for side in ("main", "sub"):
      config.learner[side].lora_rank = 4
      config.learner[side].lora_targets = ("wq", "wv", "w_up")
  for field, value in overrides.items():
    section, _, leaf = field.rpartition(".")
    target = config
    for part in section.split("."):
      target = target[part]
    target[leaf] = value
  if shapes == "closed":
    small_closed_set(config)
  return config


def run_layout(shared, layout: str, shapes: str, family: str | None = None):
  """The figures (by step) of `layout`'s run on `shapes` (made once);
  `family` overrides the layout's (its one-device baseline)."""
  own_family, overrides = LAYOUTS[layout]
  family = family or own_family
  key = (family, layout, shapes)
  if key not in shared["runs"]:
    # Each run its own `python -m mgrpo_jax.main` on 8 CPU devices: in one
    # process, XLA crashed (SIGSEGV / abort) compiling or caching the tenth
    # run's MoE learner after nine other layouts, which alone pass.
    name = f"{family}_{layout}_{shapes}"
    config = layout_config(shared, family, overrides, shapes, name)
    proc, log_file = run_child(config, shared["dir"], name, shared["cache"])
    assert proc.wait(timeout=900) == 0, log_file.read_text()[-3000:]
    lines = log_file.read_text().splitlines()
    records = by_step(MetricsWriter.read(pathlib.Path(config.run_dir) /
                                         "all"))
    shared["runs"][key] = (records, lines)
  return shared["runs"][key]


def assert_same_run(expected: dict, got: dict, where: str) -> None:
  """Every figure of `expected` is in `got`: exact ones equal, learner
  floats within 1e-4 relative."""
  assert sorted(got) == sorted(expected), where
  for step, figures in expected.items():
    for key, value in figures.items():
      if key.startswith(SKIPPED):
        continue
      assert key in got[step], (where, step, key)
      if key.rpartition("/")[2] in FLOAT_FIGURES:
        assert got[step][key] == pytest.approx(value, rel=1e-4, abs=1e-5), (
            where, step, key, got[step][key], value)
      else:
        assert got[step][key] == value, (where, step, key, got[step][key],
                                         value)


def _informative(records: dict) -> None:
  """Both agents made a real update in some step: the comparison of
  losses and gradient norms is not a comparison of zeros."""
  for agent in ("main", "sub"):
    assert any(r.get(f"{agent}/skipped_update") == 0.0 and r.get(
        f"{agent}/grad_norm", 0) > 0 for r in records.values()), agent


def _check_layout(shared, layout: str, shapes: str) -> None:
  family = LAYOUTS[layout][0]
  records, lines = run_layout(shared, layout, shapes)
  assert sorted(records) == list(range(STEPS + 1))
  assert any(f"step {STEPS}: eval/accuracy=" in line for line in lines)
  if shapes == "closed":  # Strict: a program outside the set would stop it.
    assert any(line.startswith("start-up: compiled") for line in lines)
  if layout in EXACT_LAYOUTS:
    baseline, _ = run_layout(shared, "one_device", shapes, family)
    _informative(baseline)
    assert_same_run(baseline, records, f"{layout}, {shapes}")


@pytest.mark.parametrize("shapes", ["closed", "open"])
@pytest.mark.parametrize("layout", [
    pytest.param(name, marks=pytest.mark.slow) for name in LAYOUTS
    if name != "one_device"])
def test_a_layout_trains_as_one_device_does(shared, layout, shapes):
  _check_layout(shared, layout, shapes)


def test_readme_s_tpu_vm_form_on_closed_shapes_trains_as_one_device(shared):
  """The default run's sibling of the matrix above: the layout that crashed
  at its first evaluation (a sampler over 4 devices, closed shapes)."""
  _check_layout(shared, "tpu_vm_4_4", "closed")


# ------------------------------------------------- split learners, one batch

@pytest.mark.slow  # Two learners' compilations per layout (~20 s).
@pytest.mark.parametrize("layout", ["fsdp2_tp2", "moe_experts_4"])
def test_a_split_learner_scores_and_updates_as_one_device(shared, layout):
  """Teacher-forced log-probs, and the loss and gradient norm of one
  update, on a fixed batch: the layout's learner against the one-device
  learner of the same weights."""
  from flax import nnx
  from mgrpo_jax.models import build, sharding
  from mgrpo_jax.runtime import meshes
  from mgrpo_jax.train.learner import Learner
  from mgrpo_jax.train.packing import pack
  from mgrpo_jax.train.side import learner_config
  from model_test_utils import logprob_tolerance
  family, overrides = LAYOUTS[layout]
  config = layout_config(shared, family, overrides, "open", f"{layout}_fixed")
  if family == "moe":
    from mgrpo_jax.models.loading import load_model
    model, _ = load_model(config.model.name)
  else:
    from mgrpo_jax.agents import tiny_team
    from mgrpo_jax.data.world import WorldConfig
    _, model_config = tiny_team.tiny_team_assets(
        WorldConfig(**config.world.to_dict()),
        vocab_size=config.model.vocab_size, hidden_size=32, num_layers=1,
        max_position_embeddings=1024)
    model = build.init_model(model_config, seed=3)
  mesh = meshes.agent_meshes(config.mesh)["main"]
  graphdef, state = nnx.split(model)
  rng = np.random.default_rng(0)
  lengths = [37, 120, 64, 250, 9, 180, 77, 140]
  tokens = [rng.integers(0, model.config.vocab_size, n) for n in lengths]
  masks = [np.arange(n) >= n // 3 for n in lengths]
  batch = pack(tokens, masks, [1.0, -0.5, 0.25, -1.0, 0.5, 0.0, -0.25, 0.75],
               micro_batch=4, min_len=256, max_len=256)
  tolerance = logprob_tolerance(model, tokens)  # Before updates donate it.
  figures, logprobs = {}, {}
  host = jax.tree.map(np.array, state)  # Each learner's update donates
  for where, on in (("one device", None), (layout, mesh)):  # its own copy.
    fresh = jax.tree.map(jax.numpy.array, host)
    placed = nnx.merge(graphdef, fresh if on is None
                       else sharding.place_state(fresh, on))
    learner = Learner("main", placed, learner_config(config, "main"), on)
    logprobs[where] = np.asarray(learner.logprobs(batch))
    figures[where] = learner.step(batch)
  np.testing.assert_allclose(logprobs[layout], logprobs["one device"],
                             **tolerance)
  for key in ("loss", "grad_norm"):
    assert figures[layout][key] == pytest.approx(
        figures["one device"][key], rel=1e-4), key
