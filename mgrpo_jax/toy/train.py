"""The toy M-GRPO step and run: rollouts, hierarchical rewards, advantages,
alignment, the clipped loss and one optimizer per agent (the task:
mgrpo_jax/toy/__init__.py)."""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections
import optax

from mgrpo_jax import core
from mgrpo_jax.runtime import config_checks as cc
from mgrpo_jax.runtime import logs
from mgrpo_jax.toy.task import (ToyWorld, init_params, main_logp_Rx2, make_world,
                                outcome, sub_logp_N)


MODES = ("mgrpo", "frozen_sub")  # config.mode: both agents train, or main only.


@dataclasses.dataclass(frozen=True)
class AgentSettings:
  """One agent's optimizer and loss settings (`config.learner.<agent>`)."""
  learning_rate: float
  inner_epochs: int
  eps_low: float
  eps_high: float
  beta: float
  aggregation: str

  def loss_kwargs(self) -> dict[str, Any]:
    return dict(eps_low=self.eps_low, eps_high=self.eps_high, beta=self.beta,
                aggregation=self.aggregation)


def _agent(config: ml_collections.ConfigDict, agent: str) -> AgentSettings:
  p = f"learner.{agent}"
  return AgentSettings(
      learning_rate=cc.number(config, f"{p}.learning_rate", minimum=0.0,
                              open_min=True),
      inner_epochs=cc.integer(config, f"{p}.inner_epochs", minimum=1),
      eps_low=cc.number(config, f"{p}.eps_low", minimum=0.0, maximum=1.0),
      eps_high=cc.number(config, f"{p}.eps_high", minimum=0.0),
      beta=cc.number(config, f"{p}.beta", minimum=0.0),
      aggregation=cc.choice(config, f"{p}.aggregation",
                            core.LOSS_AGGREGATIONS.names()))


@dataclasses.dataclass(frozen=True)
class StepSettings:
  """The static, validated settings of one training step."""
  questions_per_step: int
  group_size: int
  scale: str
  eps: float
  sub_group_by: str
  d_max: int
  fill: str
  main: AgentSettings
  sub: AgentSettings
  weights: tuple[tuple[str, float], ...]
  train_sub: bool  # False with mode "frozen_sub".


def validate(config: ml_collections.ConfigDict) -> StepSettings:
  """Checks every field the toy run reads; errors name the field."""
  cc.choice(config, "task", ["toy_delegation"])
  cc.integer(config, "seed", minimum=0)
  cc.integer(config, "toy.num_questions", minimum=1)
  cc.integer(config, "toy.num_answers", minimum=2)
  cc.integer(config, "toy.max_hops", minimum=1)
  max_hops = config.toy.max_hops
  cc.integer(config, "toy.max_calls", minimum=max_hops)
  mode = cc.choice(config, "mode", MODES)
  cc.integer(config, "train.steps", minimum=0)
  cc.integer(config, "train.eval_every", minimum=1)
  weights = core.reward_weights(
      cc.choice(config, "reward.preset", core.REWARD_PRESETS.names()))
  for name in weights:
    if cc.get(config, f"reward.{name}") is not None:
      weights[name] = cc.number(config, f"reward.{name}", minimum=0.0)
  return StepSettings(
      questions_per_step=cc.integer(config, "train.questions_per_step",
                                    minimum=1),
      group_size=cc.integer(config, "train.group_size", minimum=2),
      scale=cc.choice(config, "advantage.scale",
                      core.ADVANTAGE_SCALES.names()),
      eps=cc.number(config, "advantage.eps", minimum=0.0),
      sub_group_by=cc.choice(config, "advantage.sub_group_by",
                             ["question", "rollout"]),
      d_max=cc.integer(config, "align.d_max", minimum=1),
      fill=cc.choice(config, "align.fill", ["random", "best"]),
      main=_agent(config, "main"),
      sub=_agent(config, "sub"),
      weights=tuple(sorted(weights.items())),
      train_sub=mode == "mgrpo",
  )


def rollout(world: ToyWorld, params, key, s: StepSettings):
  """Samples B questions x K rollouts and their sub-agent calls."""
  b, k, c = s.questions_per_step, s.group_size, world.max_calls
  key_q, key_calls, key_fmt, key_rep = jax.random.split(key, 4)
  q_B = jax.random.randint(key_q, (b,), 0, world.hops_Q.shape[0])
  q_R = jnp.repeat(q_B, k)
  main = params["main"]
  calls_R = jax.random.categorical(key_calls, main["calls"][q_R])
  format_R = jax.random.categorical(key_fmt, main["format"][q_R])
  hops_R = world.hops_Q[q_R]
  hop_RxC = jnp.minimum(jnp.arange(c)[None, :], hops_R[:, None] - 1)
  report_logits = params["sub"]["report"][q_R[:, None], hop_RxC]
  reports_RxC = jax.random.categorical(key_rep, report_logits)
  return q_B, q_R, calls_R, format_R, reports_RxC


def train_step(world: ToyWorld, s: StepSettings, tx_main, tx_sub, ref_params,
               state, key):
  """One M-GRPO step; returns the new state and scalar metrics."""
  params, opt_main, opt_sub = state
  b, k, c = s.questions_per_step, s.group_size, world.max_calls
  r = b * k
  weights = dict(s.weights)
  key_roll, key_align = jax.random.split(key)
  q_B, q_R, calls_R, format_R, reports_RxC = rollout(world, params, key_roll,
                                                     s)
  correct_R, format_ok_R, sub_fmt_RxC, right_RxC, hop_RxC = outcome(
      world, q_R, calls_R, format_R, reports_RxC)

  # Rewards (hierarchical: each sub call shares its rollout's main outcome).
  main_rewards_R = core.main_reward(format_ok_R, correct_R,
                                    w_fmt=weights["w_fmt"],
                                    w_cor=weights["w_cor"])
  sub_rewards_RxC = core.sub_reward(
      sub_fmt_RxC, correct_R[:, None], right_RxC, v_fmt=weights["v_fmt"],
      v_main=weights["v_main"], v_exp=weights["v_exp"])

  # Store sub calls flat and rollout-major, as a real rollout would.
  m = r * c
  counts_R = calls_R.astype(jnp.int32)
  offsets_R = jnp.cumsum(counts_R) - counts_R
  called_RxC = jnp.arange(c)[None, :] < counts_R[:, None]
  flat_RxC = jnp.where(called_RxC, offsets_R[:, None] + jnp.arange(c), m)

  def to_flat(x_RxC):
    return jnp.zeros((m,), x_RxC.dtype).at[flat_RxC].set(x_RxC, mode="drop")

  sub_q_M = to_flat(jnp.broadcast_to(q_R[:, None], (r, c)))
  sub_hop_M = to_flat(hop_RxC)
  sub_report_M = to_flat(reports_RxC)
  sub_reward_M = to_flat(sub_rewards_RxC)

  # Align to [R, S]: one compiled step whatever the numbers of calls were.
  index_RxS, valid_RxS = core.align_sub_trajectories(
      key_align, counts_R, s.d_max, fill=s.fill, rewards_M=sub_reward_M)
  idx_N, valid_N = index_RxS.reshape(-1), valid_RxS.reshape(-1)

  # Group-relative advantages, each agent over its own rewards.
  group_R = jnp.repeat(jnp.arange(b), k)
  adv_main_R = core.group_relative_advantages(
      main_rewards_R, group_R, b, scale=s.scale, eps=s.eps)
  if s.sub_group_by == "question":
    sub_group_N, num_sub_groups = jnp.repeat(group_R, s.d_max), b
  else:
    sub_group_N, num_sub_groups = jnp.repeat(jnp.arange(r), s.d_max), r
  adv_sub_N = core.group_relative_advantages(
      sub_reward_M[idx_N], sub_group_N, num_sub_groups, valid_N=valid_N,
      scale=s.scale, eps=s.eps)

  old_main_Rx2 = main_logp_Rx2(params["main"], q_R, calls_R, format_R)
  sub_args = (sub_q_M[idx_N], sub_hop_M[idx_N], sub_report_M[idx_N])
  old_sub_N = sub_logp_N(params["sub"], *sub_args)
  ref_main = main_logp_Rx2(ref_params["main"], q_R, calls_R, format_R)
  ref_sub = sub_logp_N(ref_params["sub"], *sub_args)[:, None]

  def main_loss(p):
    logp = main_logp_Rx2(p, q_R, calls_R, format_R)
    return core.clipped_policy_loss(
        logp, old_main_Rx2, adv_main_R, jnp.ones_like(logp),
        ref_logp_BxT=ref_main, **s.main.loss_kwargs())

  def sub_loss(p):
    logp = sub_logp_N(p, *sub_args)[:, None]
    return core.clipped_policy_loss(
        logp, old_sub_N[:, None], adv_sub_N, valid_N[:, None],
        ref_logp_BxT=ref_sub, **s.sub.loss_kwargs())

  # Decoupled updates: two losses over disjoint parameters, two optimizers.
  p_main, p_sub = params["main"], params["sub"]
  m_sub = None
  for epoch in range(max(s.main.inner_epochs, s.sub.inner_epochs)):
    if epoch < s.main.inner_epochs:
      (_, m_main), g_main = jax.value_and_grad(main_loss, has_aux=True)(
          p_main)
      updates, opt_main = tx_main.update(g_main, opt_main, p_main)
      p_main = optax.apply_updates(p_main, updates)
    if s.train_sub and epoch < s.sub.inner_epochs:
      (_, m_sub), g_sub = jax.value_and_grad(sub_loss, has_aux=True)(p_sub)
      updates, opt_sub = tx_sub.update(g_sub, opt_sub, p_sub)
      p_sub = optax.apply_updates(p_sub, updates)
  if m_sub is None:  # A frozen sub-agent: its loss figures, no update.
    _, m_sub = sub_loss(p_sub)

  metrics = {
      "main/reward": jnp.mean(main_rewards_R),
      "main/accuracy": jnp.mean(correct_R.astype(jnp.float32)),
      "main/format": jnp.mean(format_ok_R.astype(jnp.float32)),
      "main/clip_fraction": m_main["clip_fraction"],
      "main/approx_kl": m_main["approx_kl"],
      "sub/reward": jnp.sum(sub_rewards_RxC * called_RxC)
                    / jnp.maximum(jnp.sum(called_RxC), 1),
      "sub/clip_fraction": m_sub["clip_fraction"],
      "sub/approx_kl": m_sub["approx_kl"],
      "sub/calls_per_rollout": jnp.mean(calls_R.astype(jnp.float32)),
      "align/valid_slots": jnp.mean(valid_N.astype(jnp.float32)),
  }
  return ({"main": p_main, "sub": p_sub}, opt_main, opt_sub), metrics


def greedy_accuracy(world: ToyWorld, params) -> jax.Array:
  """Share of all questions the argmax policies answer correctly."""
  q = jnp.arange(world.hops_Q.shape[0])
  calls = jnp.argmax(params["main"]["calls"], axis=-1)
  fmt = jnp.argmax(params["main"]["format"], axis=-1)
  hop_QxC = jnp.minimum(jnp.arange(world.max_calls)[None, :],
                        world.hops_Q[:, None] - 1)
  reports = jnp.argmax(params["sub"]["report"][q[:, None], hop_QxC], axis=-1)
  correct = outcome(world, q, calls, fmt, reports)[0]
  return jnp.mean(correct.astype(jnp.float32))


def run(config: ml_collections.ConfigDict,
        on_log: Callable[[int, dict[str, float]], None] | None = None
        ) -> dict[str, float]:
  """Trains for config.train.steps and returns the final metrics."""
  s = validate(config)
  key_world, key_train = jax.random.split(jax.random.key(config.seed))
  world = make_world(key_world, config.toy.num_questions,
                     config.toy.num_answers, config.toy.max_hops,
                     config.toy.max_calls)
  params = init_params(world)
  tx_main = optax.adam(s.main.learning_rate)
  tx_sub = optax.adam(s.sub.learning_rate)
  state = (params, tx_main.init(params["main"]), tx_sub.init(params["sub"]))
  step_fn = jax.jit(functools.partial(train_step, world, s, tx_main, tx_sub,
                                      params))
  accuracy_fn = jax.jit(functools.partial(greedy_accuracy, world))
  start_accuracy = float(accuracy_fn(state[0]))
  logs.say(f"toy_delegation: {config.toy.num_questions} questions, greedy "
           f"accuracy at step 0: {start_accuracy:.3f}")
  started = time.perf_counter()
  metrics: dict[str, float] = {}
  for step in range(1, config.train.steps + 1):
    state, step_metrics = step_fn(state, jax.random.fold_in(key_train, step))
    if step % config.train.eval_every == 0 or step == config.train.steps:
      metrics = {k: float(v) for k, v in step_metrics.items()}
      metrics["eval/accuracy"] = float(accuracy_fn(state[0]))
      metrics["time/seconds"] = time.perf_counter() - started
      logs.say(f"step {step}: " + " ".join(
          f"{k}={v:.3f}" for k, v in sorted(metrics.items())))
      if on_log is not None:
        on_log(step, metrics)
  metrics["eval/accuracy_start"] = start_accuracy
  metrics.setdefault("eval/accuracy", start_accuracy)
  return metrics
