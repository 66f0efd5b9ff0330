"""The paper's comparison at small scale: what `bash launch/reproduce.sh` runs.

`--config configs/reproduce.py[:SIZE]`, SIZE one of
  full    the committed results (launch/results/reproduce/);
  pilot   the same task with no test evaluation: what the pilot
          (mgrpo_jax/reproduce_pilot.py) chooses the task's settings on,
          judged on the validation split alone;
  quick   tiny sizes, every arm x 2 seeds in minutes (a slow test runs it);
and a `:clean` suffix (`full:clean`, `quick:clean`) for the variant with no
injected weakness. mgrpo_jax/reproduce.py sets the arm (mode, v_main), the
seed and the run directory on top of this file; configs/default.py
documents every field, this file changes only these.

The task (chosen by the pilot, mgrpo_jax/reproduce_pilot.py, on the
validation split only; launch/results/reproduce/PROTOCOL.md): two-hop
questions need the planner to delegate both hops (it was demonstrated
answering after the first hop in `sft.early_answer` of them) and the
sub-agent to read the page and report the right name (it was demonstrated
reporting from the 60-character search snippet, which rarely states the
fact, in `sft.lazy_report` of its hops; after the warm start about half of
its reports are wrong): both agents have room to improve, and the
sub-agent's reward tied to the main outcome (v_main), which the
mgrpo_no_credit arm removes, is its signal.
"""

import pathlib

import ml_collections

from mgrpo_jax.runtime.config_checks import load_config_file

SIZES = ("full", "pilot", "quick")


def _default() -> ml_collections.ConfigDict:
  path = pathlib.Path(__file__).with_name("default.py")
  return load_config_file(str(path))


def get_config(arg: str = "full") -> ml_collections.ConfigDict:
  size, _, variant = arg.partition(":")
  if size not in SIZES or variant not in ("", "clean"):
    raise ValueError(f"configs/reproduce.py:{arg}: expected one of "
                     f"{', '.join(SIZES)}, optionally followed by ':clean'.")
  config = _default()
  config.run_dir = "runs/reproduce"  # reproduce.py sets one per run.
  config.sft.early_answer = 0.0 if variant else 0.6  # Planner weakness: answers a two-hop question after one hop (the pilot's "eager").
  config.sft.lazy_report = 0.0 if variant else 0.1  # Sub-agent weakness: reports from the snippet, without the visit.
  config.agents.snippet_chars = 60  # Snippets cut short: most facts need the visit.
  config.world.num_entities = 200  # Entities (~350 one-hop facts: enough for half of every split to be one-hop).
  config.world.train_questions = 280  # Train questions.
  config.world.validation_questions = 128  # Validation questions: what the pilot chose the task on.
  config.world.test_questions = 200  # Held-out test questions (one is 0.5%).
  config.train.test_questions = 0 if size == "pilot" else 200  # All of them, at every evaluation (none in the pilot: test is never looked at).
  config.train.eval_samples = 0  # Greedy validation only (time).
  config.train.eval_questions = 128  # The whole validation split.
  config.train.steps = 40  # M-GRPO steps per run.
  config.train.eval_every = 10  # Evaluations (validation and test): steps 0, 10, 20, 30, 40.
  config.checkpoint.every = 10  # A killed reproduction resumes its runs from here.
  config.runtime.shapes = "open"  # The shapes the pre-registered runs sampled on (padding moves float32's last bits, so the protocol's digest keys it).
  for side in ("main", "sub"):
    config.learner[side].learning_rate = 3e-4  # The pilot's choice: 1e-3 collapsed validation accuracy in both settings tried.
    config.learner[side].log_ref_kl = True  # ref_kl in every run's curve: how far each agent moved from its warm start.
  if size == "quick":
    config.model.vocab_size = 512  # Tiny tokenizer.
    config.model.hidden_size = 32  # Tiny model width.
    config.model.num_layers = 1  # Tiny model depth.
    config.sft.steps = 20  # Barely a warm start: quick checks the plumbing.
    config.sft.batch_size = 4  # Sequences per SFT step.
    config.sft.questions = 8  # Questions demonstrated.
    config.world.num_entities = 40  # Entities.
    config.world.train_questions = 16  # Train questions.
    config.world.validation_questions = 4  # Validation questions.
    config.world.test_questions = 8  # Test questions.
    config.train.test_questions = 8  # All of them.
    config.train.eval_questions = 4  # Validation questions evaluated.
    config.train.steps = 2  # Steps per run.
    config.train.eval_every = 1  # Evaluate after every step.
    config.train.questions_per_step = 2  # B.
    config.train.group_size = 2  # K.
    config.checkpoint.every = 1  # Save after every step.
    for side in ("main", "sub"):
      config.agents[side].max_new_tokens = 48  # Tokens per turn.
      config.agents[side].context_tokens = 512  # Context budget.
      config.agents[side].rows = 8  # Conversations live at once.
      config.learner[side].micro_batch = 8  # Sequences per pass.
      config.learner[side].min_len = 128  # Smallest padded length.
      config.learner[side].max_len = 512  # Longest sequence.
  return config
