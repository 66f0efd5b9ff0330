"""SFT warm start: the masked loss, the jitted step, and a tiny model that
learns the protocol from oracle demonstrations and then keeps it in greedy
rollouts through the real sampler and rollout controller (~50 s on 2 CPU
cores, most of it compiling the train step and the sampler)."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from trainer_test_utils import learner_config
from flax import nnx

from mgrpo_jax.models import tiny as tiny_model
from mgrpo_jax.agents import demonstrations
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.models.build import init_model
from mgrpo_jax.bench import sft_study
from mgrpo_jax.train import sft
from mgrpo_jax.agents import tiny_team as tiny
from mgrpo_jax.train.packing import Batch

# One-hop questions keep demonstrations short (< 512 ids: one T bucket).
WORLD = WorldConfig(num_entities=20, train_questions=4, validation_questions=1,
                    test_questions=1, max_hops=1)
CONTEXT = 512
STEPS = 40


def test_masked_nll_matches_numpy():
  rng = np.random.default_rng(0)
  logits = rng.standard_normal((2, 3, 5)).astype(np.float32)
  targets = rng.integers(0, 5, (2, 3)).astype(np.int32)
  mask = np.array([[1, 0, 1], [0, 1, 1]], np.float32)
  total, hits = sft.masked_nll(jnp.asarray(logits), jnp.asarray(targets),
                               jnp.asarray(mask))
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  nll = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
  np.testing.assert_allclose(total, (nll * mask).sum(), rtol=1e-5)
  assert hits == ((logits.argmax(-1) == targets) * mask).sum()


class Bigram(nnx.Module):
  """A model small enough to compile in a blink: logits from the last id."""

  def __init__(self, vocab: int = 64, width: int = 8):
    rngs = nnx.Rngs(0)
    self.embed = nnx.Embed(vocab, width, rngs=rngs)
    self.out = nnx.Linear(width, vocab, rngs=rngs)

  def __call__(self, tokens_BxT):
    return self.out(self.embed(tokens_BxT))


def random_batch(n=4, t=16, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, 64, (n, t + 1)).astype(np.int32)
  mask = (rng.random((n, t)) < 0.5).astype(np.float32)
  return Batch(ids[:, :-1], ids[:, 1:], mask, np.ones(n, np.float32),
               None, np.full(n, -1, np.int32), n, n)


def test_micro_batches_add_up_to_the_whole_batch():
  batch = random_batch()
  out = []
  for micro in (4, 2):
    trainer = sft.SFTTrainer(Bigram(), learner_config(
        learning_rate=1e-2, micro_batch=micro, min_len=16, max_len=16))
    out.append((trainer.step(batch), trainer.step(batch), trainer.params))
    assert trainer.traces == 1  # Same bucket: compiled once.
  (a1, a2, pa), (b1, b2, pb) = out
  assert a1["tokens"] == b1["tokens"] == batch.mask_NxT.sum()
  for a, b in ((a1, b1), (a2, b2)):
    np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)
    np.testing.assert_allclose(a["grad_norm"], b["grad_norm"], rtol=1e-4)
  chex.assert_trees_all_close(pa, pb, atol=1e-5, rtol=1e-7)
  # The loss is the token mean: about log V for a fresh model, then lower.
  assert abs(a1["loss"] - np.log(64)) < 0.2 and a2["loss"] < a1["loss"]


def test_sft_on_a_data_parallel_mesh_equals_one_device():
  """SFT shares the RL learner's update: on a 4-way data axis each device
  trains a quarter of the rows and the step is the one-device step."""
  from model_test_utils import tiny_config
  from mgrpo_jax.models import build
  mesh = jax.make_mesh((4, 1), ("fsdp", "tp"), devices=jax.devices()[:4],
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  batch = random_batch(n=8)
  config = learner_config(learning_rate=1e-2, micro_batch=4, min_len=16,
                          max_len=16)
  got, want = (sft.SFTTrainer(build.init_model(tiny_config(), seed=0,
                                               mesh=m), config, m)
               for m in (mesh, None))
  assert {s.data.shape for s in got._rows(
      batch.inputs_NxT).addressable_shards} == {(2, 1, 16)}
  a, b = got.step(batch), want.step(batch)
  for key in ("loss", "accuracy", "grad_norm", "tokens"):
    assert a[key] == pytest.approx(b[key], rel=1e-5)
  # Adam's first step is lr * g / (|g| + eps): a weight whose gradient is
  # near 0 moves by anything up to lr when g's last bits differ (a 4-way
  # sum vs one), so weights are compared to a tenth of the step.
  for x, y in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-3)


def test_batches_visit_every_item_once_per_epoch():
  rng = np.random.default_rng(0)
  index = list(sft.batches(5, 2, 5, rng))
  assert all(len(b) == 2 for b in index)
  flat = sum(index, [])
  assert sorted(flat[:5]) == list(range(5))
  assert sorted(flat[5:10]) == list(range(5))


@pytest.fixture(scope="module")
def world():
  return generate_world(WORLD)


@pytest.fixture(scope="module")
def tok(world):
  return tiny_model.train_tokenizer(tiny.tokenizer_texts(world), 2048)


@pytest.fixture(scope="module")
def agents():
  """Small budgets: one row per agent (fewer shapes for the engine to
  compile), short turns, one-hop turn limits."""
  config = tiny.tiny_agents_config(context_tokens=CONTEXT)
  for side in ("main", "sub"):
    config[side].rows = 1
    config[side].max_new_tokens = 64
    config[side].max_turns = 3
  return config


@pytest.fixture(scope="module")
def demos(world, tok, agents):
  return demonstrations.demonstrations(world.task_set("train"), tok, agents=agents)


def test_warm_start_refuses_bad_arguments(demos):
  with pytest.raises(ValueError, match="steps=0"):
    sft.warm_start(Bigram(), demos, steps=0, batch_size=2,
                   config=learner_config())
  empty = dataclasses.replace(demos[0],
                              loss_mask=np.zeros_like(demos[0].loss_mask))
  with pytest.raises(ValueError, match="none of the 1 trajectories"):
    sft.warm_start(Bigram(), [empty], steps=1, batch_size=1,
                   config=learner_config())


@pytest.fixture(scope="module")
def trained(tok, demos):
  """SFT on the main agent's demonstrations (~290 ids each: one T bucket of
  384), to keep the test short; `sft_study.warm_start_tiny_team` measures the
  full warm start of both agents."""
  mains = [d for d in demos if d.agent == "main"]
  assert len(mains) == WORLD.train_questions
  assert max(len(d.tokens) for d in mains) <= 384
  config = tiny_model.tiny_model_config(tok.vocab_size, hidden_size=64,
                                  max_position_embeddings=CONTEXT)
  learner = learner_config(learning_rate=1e-2, warmup_steps=3,
                           total_steps=STEPS, micro_batch=len(mains),
                           min_len=48, max_len=CONTEXT)
  return sft.warm_start(init_model(config, seed=0), mains, steps=STEPS,
                        batch_size=len(mains), seed=0, config=learner)


def test_sft_drives_the_loss_down(trained):
  _, losses = trained
  assert len(losses) == STEPS
  assert losses[0] > 5.0  # ~log V at the start.
  assert np.mean(losses[-5:]) < 0.1 * losses[0]


def test_sft_model_keeps_the_protocol_in_greedy_rollouts(trained, tok, world,
                                                         agents):
  """Through the real sampler and controller: well-formed delegations and
  answers (the untrained sub-agent's reports do not matter here)."""
  model, _ = trained
  rollouts, figures = sft_study.greedy_eval(model, tok, world.task_set("train"),
                                      agents)
  mains = [row[0].main for row in rollouts]
  assert figures["format"] == np.mean([m.format_ok for m in mains])
  delegated = [m for m in mains if m.format_ok and any(
      t.tool == "delegate" and t.format_ok for t in m.turns)]
  assert delegated, [t.text for m in mains for t in m.turns]
