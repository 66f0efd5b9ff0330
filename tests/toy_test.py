"""The toy M-GRPO run: it learns, the frozen-sub baseline does not, and the
step is deterministic and compiled once."""

import importlib.util
import pathlib

import jax
import numpy as np
import pytest

from mgrpo_jax.runtime import config_checks
from mgrpo_jax import toy

ROOT = pathlib.Path(__file__).resolve().parents[1]


def default_config():
  spec = importlib.util.spec_from_file_location("default_config",
                                                ROOT / "configs/toy.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def test_mgrpo_learns_and_beats_frozen_sub():
  trained = toy.run(default_config())
  assert trained["eval/accuracy_start"] < 0.1
  assert trained["eval/accuracy"] >= 0.9
  config = default_config()
  config.mode = "frozen_sub"
  frozen = toy.run(config)
  assert frozen["eval/accuracy"] < trained["eval/accuracy"] - 0.5


@pytest.mark.slow  # 10 s; test_mgrpo_learns_and_beats_frozen_sub runs the toy in the default run.
def test_same_seed_same_run_other_seed_other_run():
  config = default_config()
  config.train.steps = 20
  config.train.eval_every = 20
  a, b = toy.run(config), toy.run(config)
  config.seed = 1
  c = toy.run(config)
  drop = lambda m: {k: v for k, v in m.items() if not k.startswith("time/")}
  assert drop(a) == drop(b)
  assert drop(a) != drop(c)


def test_outcome_rules_by_hand():
  # One question needing 2 hops with gold answers (3, 1); up to 3 calls.
  world = toy.ToyWorld(hops_Q=np.array([2]), gold_QxH=np.array([[3, 1]]),
                       num_answers=4, max_calls=3)
  q = np.zeros(4, int)
  calls = np.array([2, 1, 3, 2])
  fmt = np.array([0, 0, 0, 1])
  reports = np.array([[3, 1, 0], [3, 0, 0], [3, 1, 2], [3, 1, 0]])
  correct, fmt_ok, sub_fmt, right, hop = toy.outcome(world, q, calls, fmt,
                                                     reports)
  # 2 right calls: correct. 1 call: too few. 3 calls, last one wrong: wrong.
  # Malformed main answer: wrong whatever the reports.
  assert correct.tolist() == [True, False, False, False]
  assert hop.tolist() == [[0, 1, 1]] * 4
  assert sub_fmt.tolist()[2] == [True, True, True]
  assert sub_fmt.tolist()[1] == [True, False, False]  # only the call made


def test_train_step_compiles_once_across_steps():
  config = default_config()
  settings = toy.validate(config)
  world = toy.make_world(jax.random.key(0), 8, 3, 2, 4)
  params = toy.init_params(world)
  import optax
  tx = optax.adam(0.1)
  traces = []

  def step(state, key):
    traces.append(1)
    return toy.train_step(world, settings, tx, tx, params, state, key)

  step = jax.jit(step)
  state = (params, tx.init(params["main"]), tx.init(params["sub"]))
  for i in range(5):
    state, metrics = step(state, jax.random.key(i))
  assert len(traces) == 1
  assert np.isfinite(float(metrics["main/reward"]))


@pytest.mark.parametrize("field, value, message", [
    ("align.d_max", 0, "config.align.d_max=0: expected an integer >= 1"),
    ("align.fill", "worst", "config.align.fill='worst': expected one of"),
    ("advantage.scale", "grop", "config.advantage.scale='grop'"),
    ("learner.main.aggregation", "mean",
     "config.learner.main.aggregation='mean'"),
    ("learner.sub.eps_low", 1.5,
     "config.learner.sub.eps_low=1.5: expected a number in [0.0, 1.0]"),
    ("train.group_size", 1, "config.train.group_size=1: expected an integer >= 2"),
    ("learner.main.learning_rate", 0.0, "config.learner.main.learning_rate=0.0"),
    ("learner.sub.inner_epochs", 0, "config.learner.sub.inner_epochs=0"),
    ("mode", "single", "config.mode='single': expected one of"),
    ("reward.preset", "paper", "config.reward.preset='paper'"),
    ("toy.max_calls", 1, "config.toy.max_calls=1: expected an integer >= 2"),
])
def test_bad_config_names_the_field(field, value, message):
  config = default_config()
  *sections, name = field.split(".")
  target = config
  for section in sections:
    target = target[section]
  target[name] = value
  with pytest.raises(config_checks.ConfigError) as error:
    toy.validate(config)
  assert message in str(error.value)


def test_reward_override_takes_effect():
  config = default_config()
  config.reward.v_exp = 0.3
  assert dict(toy.validate(config).weights)["v_exp"] == 0.3
