"""The testbed where the tools decide: agents that must read.

`--config configs/reading.py[:SIZE]`, SIZE one of
  full    the testbed (the comparison's task; what the capacity probe,
          python -m mgrpo_jax.bench.reading_probe, measures at step 0);
  quick   tiny sizes, for tests of the plumbing.

The warm start never sees the run's world: it is trained on oracle
demonstrations of `sft.worlds` other worlds with fresh random names
(data/demo_worlds.py), so no train, validation or test fact can be
recalled, only read from the page the sub-agent visits. Every evaluation
logs novel-fact accuracy (here: all of the accuracy) and the reader's check
(eval/counterfactual_follows: answers that follow a page whose fact was
changed). configs/default.py documents every field; this file changes only
these. No weakness is injected (sft.early_answer and sft.lazy_report are
0): what the warm start leaves wrong is measured, not designed.
"""

import pathlib

import ml_collections

from mgrpo_jax.runtime.config_checks import load_config_file

SIZES = ("full", "quick")


def get_config(arg: str = "full") -> ml_collections.ConfigDict:
  if arg not in SIZES:
    raise ValueError(f"configs/reading.py:{arg}: expected one of "
                     f"{', '.join(SIZES)}.")
  config = load_config_file(str(pathlib.Path(__file__).with_name(
      "default.py")))
  config.run_dir = "runs/reading"  # One per run.
  config.sft.worlds = 25  # The warm start demonstrates 25 other worlds (10 questions each), none of the run's.
  config.sft.early_answer = 0.0  # No injected planner weakness.
  config.sft.lazy_report = 0.0  # No injected sub-agent weakness.
  config.agents.snippet_chars = 60  # Snippets cut short: the fact needs the visit.
  config.world.num_entities = 200  # Entities of the run's world (and of each demonstration world).
  config.world.train_questions = 280  # Train questions (none demonstrated).
  config.world.validation_questions = 128  # Validation questions: what every choice is made on.
  config.world.test_questions = 200  # Held-out test questions.
  config.train.eval_samples = 0  # Greedy validation only (time).
  config.train.eval_questions = 128  # The whole validation split.
  config.train.counterfactual_questions = 64  # The reader's check on half of the validation split.
  config.runtime.shapes = "open"  # Short CPU runs: compile what is met, not a closed set.
  for side in ("main", "sub"):
    config.learner[side].learning_rate = 3e-4  # The earlier pilot's choice: 1e-3 collapsed validation accuracy.
    config.learner[side].log_ref_kl = True  # How far each agent moved from its warm start.
  if arg == "quick":
    config.model.vocab_size = 512  # Tiny tokenizer.
    config.model.hidden_size = 32  # Tiny model width.
    config.model.num_layers = 1  # Tiny model depth.
    config.sft.steps = 4  # Barely a warm start: quick checks the plumbing.
    config.sft.batch_size = 4  # Sequences per SFT step.
    config.sft.questions = 8  # Questions demonstrated.
    config.sft.worlds = 2  # Two demonstration worlds.
    config.world.num_entities = 40  # Entities.
    config.world.train_questions = 16  # Train questions.
    config.world.validation_questions = 4  # Validation questions.
    config.world.test_questions = 4  # Test questions.
    config.train.test_questions = 0  # None.
    config.train.eval_questions = 4  # Validation questions evaluated.
    config.train.counterfactual_questions = 4  # All of them.
    config.train.steps = 1  # Steps.
    config.train.eval_every = 1  # Evaluate after every step.
    config.train.questions_per_step = 2  # B.
    config.train.group_size = 2  # K.
    for side in ("main", "sub"):
      config.agents[side].max_new_tokens = 48  # Tokens per turn.
      config.agents[side].context_tokens = 512  # Context budget.
      config.agents[side].rows = 8  # Conversations live at once.
      config.learner[side].micro_batch = 8  # Sequences per pass.
      config.learner[side].min_len = 128  # Smallest padded length.
      config.learner[side].max_len = 512  # Longest sequence.
  return config
