"""The per-agent learner: packing, the update, micro-batches, meshes."""

import chex
import jax
import numpy as np
import pytest
from trainer_test_utils import learner_config

from model_test_utils import tiny_config
from mgrpo_jax.models import build
from mgrpo_jax.train import update
from mgrpo_jax.train.learner import Learner
from mgrpo_jax.train.packing import closed_lengths, pack


def trajectories(n=4, seed=0):
  rng = np.random.default_rng(seed)
  tokens, masks = [], []
  for i in range(n):
    length = 10 + 3 * i
    tokens.append(rng.integers(0, 300, length).astype(np.int32))
    mask = np.zeros(length, bool)
    mask[5:] = True  # A 5-id prompt, then generated ids.
    masks.append(mask)
  return tokens, masks


def test_pack_shifts_targets_and_masks_and_pads():
  tokens, masks = trajectories(3)
  batch = pack(tokens, masks, [1.0, -1.0, 0.5], micro_batch=2, min_len=8,
               max_len=64, valid=[True, True, False])
  assert batch.inputs_NxT.shape == (4, 16)  # 3 -> 4 rows; 15 -> 16 slots.
  np.testing.assert_array_equal(batch.inputs_NxT[0, :9], tokens[0][:9])
  np.testing.assert_array_equal(batch.targets_NxT[0, :9], tokens[0][1:])
  # Target t is generated iff id t+1 is: the first 4 targets are prompt.
  np.testing.assert_array_equal(batch.mask_NxT[0, :9], [0] * 4 + [1] * 5)
  assert batch.mask_NxT[0, 9:].sum() == 0
  assert batch.mask_NxT[2].sum() == 0 and batch.mask_NxT[3].sum() == 0
  assert batch.num_sequences == 2
  with pytest.raises(ValueError, match="3 token arrays, 2 masks"):
    pack(tokens, masks[:2], [0, 0, 0], micro_batch=1, min_len=8, max_len=64)


def test_closed_lengths_list_every_length_pack_gives():
  assert closed_lengths(64, 1024) == [64, 96, 128, 192, 256, 384, 512, 768,
                                      1024]
  assert closed_lengths(100, 1000) == [100, 150, 200, 300, 400, 600, 800,
                                       1000]
  masks = lambda n: [np.ones(n, bool)]
  for n in range(2, 1100, 7):
    t = pack([np.arange(n) % 7], masks(n), [1.0], micro_batch=1, min_len=100,
             max_len=1000).inputs_NxT.shape[1]
    assert t in closed_lengths(100, 1000), (n, t)


def _learner(micro_batch, mesh=None, **kw):
  model = build.init_model(tiny_config(), seed=0, mesh=mesh)
  return Learner("main", model, learner_config(
      learning_rate=1e-2, micro_batch=micro_batch, min_len=8, max_len=64,
      **kw), mesh)


def test_positive_advantage_raises_its_tokens_logprobs():
  tokens, masks = trajectories(4)
  adv = [1.0, 1.0, -1.0, -1.0]
  learner = _learner(4)
  batch = pack(tokens, masks, adv, micro_batch=4, min_len=8, max_len=64)
  before = np.asarray(learner.logprobs(batch)[0])
  metrics = learner.step(batch)
  after = np.asarray(learner.logprobs(batch)[0])
  gained = ((after - before) * batch.mask_NxT).sum(1)
  assert gained[0] > 0 and gained[1] > 0 and gained[2] < 0 and gained[3] < 0
  assert metrics["tokens"] == batch.mask_NxT.sum() and metrics["grad_norm"] > 0


def test_micro_batches_give_the_same_update_as_one_batch():
  tokens, masks = trajectories(4)
  adv = [1.0, -0.5, 0.25, -1.0]
  results, metrics = [], []
  for micro in (4, 2, 1):
    learner = _learner(micro)
    metrics.append(learner.step(pack(tokens, masks, adv, micro_batch=micro,
                                     min_len=8, max_len=64)))
    results.append(jax.tree.leaves(learner.params))
  # The accumulated gradient (its norm) and the loss are the whole batch's
  # whatever the micro-batching: each micro-batch divides by the global
  # token count. A per-micro-batch denominator would change both.
  for m in metrics[1:]:
    assert m["grad_norm"] == pytest.approx(metrics[0]["grad_norm"], rel=1e-5)
    assert m["loss"] == pytest.approx(metrics[0]["loss"], rel=1e-5, abs=1e-7)
  # Adam divides by the gradient's scale, so float32 summation-order noise
  # in near-zero gradients can move a weight by up to ~1e-4 of a 1e-2 step.
  for other in results[1:]:
    chex.assert_trees_all_close(tuple(results[0]), tuple(other), atol=1e-4,
                                rtol=1e-7)


def _assert_same_update(learner, got, reference, want):
  """Two learners' updates of one batch: the same loss and gradient norm,
  and weights equal but for float32 summation order (Adam divides by the
  gradient's scale: up to ~1e-4 of a 1e-2 step)."""
  assert got["loss"] == pytest.approx(want["loss"], rel=1e-5, abs=1e-7)
  assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-5)
  chex.assert_trees_all_close(learner.params, reference.params, atol=1e-4,
                              rtol=1e-7)
  chex.assert_tree_all_finite(learner.params)


def test_remat_trains_the_same_weights_with_less_memory():
  tokens, masks = trajectories(4)
  batch = pack(tokens, masks, [1.0, -0.5, 0.25, -1.0], micro_batch=4,
               min_len=8, max_len=64)
  kept, recomputed = _learner(4), _learner(4, remat=True)
  _assert_same_update(recomputed, recomputed.step(batch), kept,
                      kept.step(batch))
  # The backward pass keeps one [B, T, D] input per layer, not its
  # attention probabilities and MLP activations.
  assert (recomputed.update_memory(1, 256)["temporaries"]
          < 0.6 * kept.update_memory(1, 256)["temporaries"])


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean",
                                         "sequence_sum_norm"])
def test_denominator_is_the_trajectories_not_the_padded_rows(aggregation):
  """The loss divides by the aggregation's denominator over the packed
  trajectories (computed inside the jitted update): a padding row changes
  nothing, and Dr. GRPO's B is the 3 trajectories, not the 4 rows."""
  tokens, masks = trajectories(3)
  adv = np.array([1.0, -0.5, 0.25])
  batch = pack(tokens, masks, adv, micro_batch=2, min_len=8, max_len=64)
  assert batch.inputs_NxT.shape[0] == 4 and batch.num_rows == 3
  metrics = _learner(2, aggregation=aggregation).step(batch)
  # First update: ratio 1, so each generated token's loss is -A.
  count = batch.mask_NxT[:3].sum(1)
  want = {"token_mean": -(adv * count).sum() / count.sum(),
          "sequence_mean": -adv.mean(),
          "sequence_sum_norm": -(adv * count).sum() / (3 * 64)}[aggregation]
  assert metrics["loss"] == pytest.approx(want, rel=1e-5)


def test_compilations_stay_constant_across_steps():
  learner = _learner(2, inner_epochs=2)
  for step in range(3):
    tokens, masks = trajectories(4, seed=step)  # Lengths 10..19: bucket 32.
    learner.step(pack(tokens, masks, [1.0, -1.0, 0.5, 0.0], micro_batch=2,
                      min_len=8, max_len=64))
    if step == 0:
      first = dict(learner.traces)
  assert dict(learner.traces) == first
  # One compiled update (accumulation and apply in one jit) and the
  # old log-probs' pass of mu = 2.
  assert first == {"logp": 1, "update": 1}


def test_one_epoch_takes_old_logprobs_from_its_own_forward_pass():
  tokens, masks = trajectories(4)
  batch = pack(tokens, masks, [1.0, -0.5, 0.25, -1.0], micro_batch=4,
               min_len=8, max_len=64)
  learner = _learner(4)  # mu = 1
  learner.step(batch)
  assert dict(learner.traces) == {"update": 1}  # No old log-probs pass.
  old = learner.logprobs(batch)
  rows = [learner._rows(a) for a in (batch.inputs_NxT, batch.targets_NxT,
                                     batch.mask_NxT)]
  adv = learner._rows(batch.adv_N)

  loss = lambda p, xs: learner._loss_fn(p, xs, 10.0, 1)
  recomputed = update.accumulate(loss, learner.params,
                                 (*rows, old, None, None, adv))
  skipped = update.accumulate(loss, learner.params,
                              (*rows, None, None, None, adv))
  # The same loss and gradient as with the recomputed old log-probs.
  np.testing.assert_allclose(skipped[1], recomputed[1], rtol=1e-6)
  # Two programs (with and without the old log-probs as an input) may sum
  # in another order: an Intel Xeon (family 6 model 167) differed by 1.3e-7
  # on a 0.15 gradient entry.
  chex.assert_trees_all_close(skipped[0], recomputed[0], rtol=1e-5,
                              atol=1e-7)


def _mesh(shape, devices):
  return jax.make_mesh(shape, ("fsdp", "tp"), devices=devices,
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)


@pytest.mark.parametrize("shape", [(8, 1), (4, 2)])
def test_batch_rows_are_split_over_the_data_axis(shape):
  """Data parallel: each device of the data axis holds 1/n of a
  micro-batch's rows, and the step's loss, gradient and new weights equal
  the one-device learner's."""
  mesh = _mesh(shape, jax.devices()[:8])
  tokens, masks = trajectories(8)
  adv = [1.0, -0.5, 0.25, -1.0, 0.5, 0.0, -0.25, 0.75]
  batch = pack(tokens, masks, adv, micro_batch=8, min_len=8, max_len=64)
  sharded, alone = _learner(8, mesh=mesh), _learner(8)
  inputs_UxMxT = sharded._rows(batch.inputs_NxT)
  for shard in inputs_UxMxT.addressable_shards:
    assert shard.data.shape == (1, 8 // shape[0], inputs_UxMxT.shape[2])
  _assert_same_update(sharded, sharded.step(batch), alone, alone.step(batch))


def test_a_micro_batch_the_data_axis_does_not_divide_is_named():
  with pytest.raises(ValueError, match=r"learner.main.micro_batch=6: "
                     r"expected a multiple of the mesh's data axis \(fsdp=4"):
    _learner(6, mesh=_mesh((4, 1), jax.devices()[:4]))


def test_parameters_and_optimizer_state_stay_on_the_agents_mesh():
  devices = jax.devices()[4:8]
  mesh = _mesh((2, 2), devices)
  learner = _learner(2, mesh=mesh)
  for leaf in jax.tree.leaves(learner.opt_state):  # Before any step, too.
    assert set(leaf.sharding.device_set) == set(devices)
  tokens, masks = trajectories(4)
  learner.step(pack(tokens, masks, [1.0, -1.0, 0.5, 0.0], micro_batch=2,
                    min_len=8, max_len=64))
  for leaf in jax.tree.leaves((learner.params, learner.opt_state)):
    if hasattr(leaf, "sharding") and leaf.ndim:
      assert set(leaf.sharding.device_set) == set(devices)


@pytest.mark.parametrize("field, value", [
    ("micro_batch", 0), ("inner_epochs", -1), ("learning_rate", -1.0),
    ("aggregation", "mean"), ("remat", 1)])
def test_bad_learner_config_is_named(field, value):
  with pytest.raises(ValueError, match=f"LearnerConfig.{field}"):
    learner_config(**{field: value})


@pytest.mark.parametrize("temperature, top_k", [(1.0, 0), (0.6, 0),
                                                (0.6, 20), (0.0, 0)])
def test_learner_logprobs_equal_the_samplers_on_multi_turn_rollouts(
    temperature, top_k):
  """The loss scores exactly the ids the engine sampled, at the positions
  it sampled them (prompt, error messages and turn boundaries included),
  under the distribution it sampled from: packed log-probs equal the
  engine's own at the rollouts' temperature (with top-k too: both score the
  distribution before truncation), and the learner's
  behaviour_logp_gap_max says so."""
  from model_test_utils import tiny_tokenizer
  from mgrpo_jax.agents import prompts
  from mgrpo_jax.agents.rollout import Agent, RolloutController
  from mgrpo_jax.data.task import Task
  from mgrpo_jax.sampling import Engine
  from mgrpo_jax.sampling.sampling_params import SamplingParams
  model = build.init_model(tiny_config(max_position_embeddings=512), seed=0)
  engine = Engine(model, max_conversations=4, cache_len=512, chunk_steps=8)
  agent = Agent("main", engine, tiny_tokenizer(), prompts.MAIN_ROLE,
                SamplingParams(temperature=temperature, top_k=top_k,
                               max_new_tokens=24),
                max_turns=3)
  tasks = [Task(f"q{i}", f"Question {i}?", ("x",), "test") for i in range(2)]
  rollouts = RolloutController(agent, []).run(tasks, group_size=2,
                                              key=jax.random.key(1))
  trajectories = [r.main for row in rollouts for r in row]
  # A random model breaks the protocol: error messages sit between turns.
  assert any(len(t.turns) > 1 for t in trajectories)
  learner = Learner("main", model, learner_config(
      learning_rate=1e-3, micro_batch=2, min_len=64, max_len=512),
      temperature=temperature)
  batch = pack([t.tokens for t in trajectories],
               [t.loss_mask for t in trajectories],
               [1.0, -1.0] * (len(trajectories) // 2), micro_batch=2,
               min_len=64, max_len=512,
               logprobs=[t.logprobs for t in trajectories])
  logp_NxT = np.concatenate(np.asarray(learner.logprobs(batch)))
  for i, t in enumerate(trajectories):
    n = len(t.tokens) - 1
    mask = batch.mask_NxT[i, :n].astype(bool)
    assert mask.sum() == t.loss_mask[1:].sum() > 0
    np.testing.assert_allclose(logp_NxT[i, :n][mask], t.logprobs[1:][mask],
                               atol=2e-4)
  metrics = learner.step(batch)  # The gap is taken before the update.
  assert 0 < metrics["behaviour_logp_gap_max"] < 1e-3
  assert metrics["is_weight_mean"] == pytest.approx(1.0, abs=1e-3)
  assert metrics["is_truncated_fraction"] == 0.0
  # A learner at the wrong temperature sees the gap.
  same = build.init_model(tiny_config(max_position_embeddings=512), seed=0)
  wrong = Learner("main", same, learner.config,
                  temperature=0.5 if temperature in (0.0, 1.0) else 1.0)
  assert wrong.step(batch)["behaviour_logp_gap_max"] > 1e-2


def test_all_zero_advantages_make_no_update_and_say_so():
  """Adam's momentum would move the weights even on a zero gradient."""
  tokens, masks = trajectories(4)
  learner = _learner(2)
  learner.step(pack(tokens, masks, [1.0, -1.0, 0.5, 0.0], micro_batch=2,
                    min_len=8, max_len=64))  # Momentum is non-zero now.
  before = [np.asarray(x).copy() for x in jax.tree.leaves(learner.params)]
  metrics = learner.step(pack(tokens, masks, [0.0] * 4, micro_batch=2,
                              min_len=8, max_len=64))
  assert metrics["skipped_update"] == 1.0 and learner.step_count == 2
  for a, b in zip(before, jax.tree.leaves(learner.params)):
    np.testing.assert_array_equal(a, np.asarray(b))
  assert learner.step(pack(tokens, masks, [0.0, 0.0, 0.0, 1.0],
                           micro_batch=2, min_len=8,
                           max_len=64))["skipped_update"] == 0.0


def test_staleness_counts_versions_between_sampler_and_learner():
  tokens, masks = trajectories(4)
  learner = _learner(2)
  for _ in range(3):
    learner.step(pack(tokens, masks, [1.0, -1.0, 0.5, 0.0], micro_batch=2,
                      min_len=8, max_len=64))
  metrics = learner.step(pack(tokens, masks, [1.0, -1.0, 0.5, 0.0],
                              micro_batch=2, min_len=8, max_len=64,
                              versions=[2, 2, 3, 3]))
  assert metrics["staleness"] == 0.5  # The learner is at version 3.


def test_log_ref_kl_logs_the_distance_to_the_start_without_changing_the_update():
  """beta = 0 with log_ref_kl: ref_kl is 0 on the first step (the policy is
  its own reference), grows once the weights moved, and the weights follow
  exactly the path of a learner that does not log it."""
  tokens, masks = trajectories(4)
  batch = pack(tokens, masks, [1.0, 1.0, -1.0, -1.0], micro_batch=4,
               min_len=8, max_len=64)
  logged, plain = _learner(4, log_ref_kl=True), _learner(4)
  first = logged.step(batch)
  assert first["ref_kl"] == pytest.approx(0.0, abs=1e-6)
  plain.step(batch)
  second = logged.step(batch)
  assert "ref_kl" not in plain.step(batch)
  assert second["ref_kl"] > 1e-4
  chex.assert_trees_all_equal(logged.params, plain.params)
  with pytest.raises(ValueError, match="log_ref_kl=1"):
    learner_config(log_ref_kl=1)
