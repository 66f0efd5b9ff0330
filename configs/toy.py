"""The toy delegation task: `python -m mgrpo_jax.main --config configs/toy.py`.

Tabular agents (mgrpo_jax/toy/) trained with the full M-GRPO step
in about a minute on a CPU: a check of the core math end to end, and the
toy-task notebook's training run (colabs/toy_task.ipynb). Every field can be overridden on the
command line, e.g. `--config.train.steps=50`.
"""

import ml_collections
from ml_collections import config_dict


def _learner() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.learning_rate = 0.05  # Adam learning rate.
  c.inner_epochs = 1  # mu: updates per batch of rollouts.
  c.eps_low = 0.2  # Lower clip: ratio >= 1 - eps_low.
  c.eps_high = 0.28  # Upper clip: ratio <= 1 + eps_high (DAPO clip-higher).
  c.beta = 0.0  # KL penalty weight towards the initial policy (k3).
  c.aggregation = "token_mean"  # "token_mean", "sequence_mean", "sequence_sum_norm".
  return c


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.seed = 0  # Seeds every PRNG key of the run: same seed, same run.
  config.task = "toy_delegation"  # What main.py trains: "toy_delegation" (this) or "agents".
  config.mode = "mgrpo"  # "mgrpo" (both agents train) or "frozen_sub" (only the main agent: the baseline).

  config.toy = ml_collections.ConfigDict()
  config.toy.num_questions = 64  # Questions in the toy world (Q).
  config.toy.num_answers = 4  # Possible answers per hop (A).
  config.toy.max_hops = 2  # Each question needs 1..max_hops sub-agent hops.
  config.toy.max_calls = 4  # Most sub-agent calls the main agent can make (C).

  config.train = ml_collections.ConfigDict()
  config.train.steps = 300  # Training steps.
  config.train.questions_per_step = 16  # Questions per step (B).
  config.train.group_size = 8  # Rollouts per question, the GRPO group (K).
  config.train.eval_every = 50  # Greedy accuracy (and a metrics line) every this many steps.

  config.advantage = ml_collections.ConfigDict()
  config.advantage.scale = "group"  # "group" (GRPO), "batch", "none" (Dr. GRPO).
  config.advantage.eps = 1e-6  # Added to the std before dividing.
  config.advantage.sub_group_by = "question"  # Sub-agent groups: "question" or "rollout".

  config.align = ml_collections.ConfigDict()
  config.align.d_max = 2  # Sub-agent slots per rollout (D_max, M-GRPO alignment).
  config.align.fill = "random"  # Fill free slots with "random" or "best" duplicates.

  config.learner = ml_collections.ConfigDict()  # Per agent, as in configs/default.py.
  config.learner.main = _learner()  # Main agent's optimizer and loss.
  config.learner.sub = _learner()  # Sub-agent's optimizer and loss.

  config.reward = ml_collections.ConfigDict()
  config.reward.preset = "mgrpo"  # Named weights: "mgrpo", "outcome_only", "with_expert".
  config.reward.w_fmt = config_dict.placeholder(float)  # Main format weight (None: preset's).
  config.reward.w_cor = config_dict.placeholder(float)  # Main correctness weight (None: preset's).
  config.reward.v_fmt = config_dict.placeholder(float)  # Sub format weight (None: preset's).
  config.reward.v_main = config_dict.placeholder(float)  # Sub weight of main's outcome (None: preset's).
  config.reward.v_exp = config_dict.placeholder(float)  # Sub expert-score weight (None: preset's).
  return config
