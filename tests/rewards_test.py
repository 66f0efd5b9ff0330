"""main_reward / sub_reward per METHOD.md, presets and errors."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mgrpo_jax import REWARD_PRESETS, main_reward, reward_weights, sub_reward


def test_main_reward_levels():
  fmt = np.array([0, 1, 1, 0])
  cor = np.array([1, 0, 1, 0])
  np.testing.assert_allclose(main_reward(fmt, cor), [0.0, 0.1, 1.0, 0.0],
                             rtol=1e-6)


def test_sub_reward_is_tied_to_main_outcome():
  sub_fmt = jnp.array([True, True, False, True])
  main_correct = jnp.array([1.0, 0.0, 1.0, 1.0])
  expert = jnp.array([0.0, 1.0, 1.0, 0.5])
  np.testing.assert_allclose(sub_reward(sub_fmt, main_correct),
                             [1.0, 0.1, 0.0, 1.0], rtol=1e-6)
  got = sub_reward(sub_fmt, main_correct, expert, v_fmt=0.1, v_main=0.6,
                   v_exp=0.3)
  np.testing.assert_allclose(got, [0.7, 0.4, 0.0, 0.85], rtol=1e-6)


def test_rewards_broadcast_and_jit():
  # Per-rollout main correctness broadcast over that rollout's sub slots.
  main_correct_R = jnp.array([1.0, 0.0])
  sub_fmt_RxS = jnp.ones((2, 3))
  got = jax.jit(sub_reward)(sub_fmt_RxS, main_correct_R[:, None])
  np.testing.assert_allclose(got, [[1.0] * 3, [0.1] * 3], rtol=1e-6)


def test_presets():
  assert reward_weights("mgrpo") == dict(w_fmt=0.1, w_cor=0.9, v_fmt=0.1,
                                         v_main=0.9, v_exp=0.0)
  assert reward_weights("mgrpo", v_exp=0.2)["v_exp"] == 0.2
  assert {"mgrpo", "outcome_only", "with_expert"} <= set(REWARD_PRESETS)
  for name in REWARD_PRESETS:
    w = reward_weights(name)
    # A fully successful rollout never earns more than 1.
    assert w["w_fmt"] + w["w_cor"] <= 1 + 1e-9
    assert w["v_fmt"] + w["v_main"] + w["v_exp"] <= 1 + 1e-9


@pytest.mark.parametrize("call, message", [
    (lambda: main_reward(np.ones(3), np.ones(4)),
     "'format_ok, correct' must be broadcastable shapes"),
    (lambda: main_reward(np.array(["a"]), np.ones(1)),
     "'format_ok' must be a bool or numeric array"),
    (lambda: main_reward(1, 1, w_fmt=-0.1), "'w_fmt' must be a finite number"),
    (lambda: sub_reward(1, 1, v_exp=0.5), "'expert' must be given when v_exp > 0"),
    (lambda: sub_reward(1, 1, np.array([1.5]), v_exp=0.5),
     "'expert' must be scores in [0, 1]"),
    (lambda: reward_weights("paper"), "unknown reward preset preset='paper'"),
    (lambda: reward_weights("mgrpo", w_x=1.0), "unknown weight 'w_x'"),
])
def test_bad_input_is_named(call, message):
  with pytest.raises(ValueError, match=re.escape(message)):
    call()
