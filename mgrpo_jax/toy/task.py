"""The toy delegation task: its world, tabular policies, outcome and log-probs.

See mgrpo_jax/toy/__init__.py for the task; shape letters as there."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class ToyWorld:
  """Hops h_Q and gold hop answers gold_QxH of every question."""
  hops_Q: jax.Array
  gold_QxH: jax.Array
  num_answers: int
  max_calls: int


def make_world(key: jax.Array, num_questions: int, num_answers: int,
               max_hops: int, max_calls: int) -> ToyWorld:
  key_h, key_g = jax.random.split(key)
  hops_Q = jax.random.randint(key_h, (num_questions,), 1, max_hops + 1)
  gold_QxH = jax.random.randint(key_g, (num_questions, max_hops), 0,
                                num_answers)
  return ToyWorld(hops_Q, gold_QxH, num_answers, max_calls)


def init_params(world: ToyWorld) -> dict[str, Any]:
  """Uniform tabular policies: logits all zero."""
  q, h = world.gold_QxH.shape
  return {
      "main": {"calls": jnp.zeros((q, world.max_calls + 1)),
               "format": jnp.zeros((q, 2))},
      "sub": {"report": jnp.zeros((q, h, world.num_answers + 1))},
  }


def outcome(world: ToyWorld, q_R, calls_R, format_R, reports_RxC):
  """Main correctness, sub format and sub expert scores of each rollout."""
  c = world.max_calls
  hops_R = world.hops_Q[q_R]
  hop_RxC = jnp.minimum(jnp.arange(c)[None, :], hops_R[:, None] - 1)
  gold_RxC = jnp.take_along_axis(world.gold_QxH[q_R], hop_RxC, axis=1)
  right_RxC = reports_RxC == gold_RxC
  called_RxC = jnp.arange(c)[None, :] < calls_R[:, None]
  needed_RxC = jnp.arange(c)[None, :] < hops_R[:, None]
  chain_ok_R = jnp.all(right_RxC | ~needed_RxC, axis=1)
  last_R = jnp.take_along_axis(right_RxC, jnp.maximum(calls_R - 1, 0)[:, None],
                               axis=1)[:, 0]
  format_ok_R = format_R == 0
  correct_R = format_ok_R & (calls_R >= hops_R) & chain_ok_R & last_R
  sub_format_ok_RxC = (reports_RxC < world.num_answers) & called_RxC
  return correct_R, format_ok_R, sub_format_ok_RxC, right_RxC, hop_RxC


def _logp(logits, tokens):
  return jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[..., None],
                             axis=-1)[..., 0]


def main_logp_Rx2(main_params, q_R, calls_R, format_R):
  return jnp.stack([_logp(main_params["calls"][q_R], calls_R),
                    _logp(main_params["format"][q_R], format_R)], axis=1)


def sub_logp_N(sub_params, q_N, hop_N, report_N):
  return _logp(sub_params["report"][q_N, hop_N], report_N)
