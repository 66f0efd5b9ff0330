"""Evaluation of an agent team: `python -m mgrpo_jax.evaluate --config configs/evaluate.py`.

The default is the untrained SmolLM2-135M-Instruct as both main agent and
sub-agent on the synthetic world's test split, sized for a 2-core CPU. Every
field can be overridden, e.g. `--config.eval.limit=0` (all questions) or
`--config.agents.layout=single`. `--config.tools.backend=web` searches the live
web instead of a local corpus (README "Live web tools").
"""

import pathlib

import ml_collections
from ml_collections import config_dict

from mgrpo_jax.agents.team import agents_config
from mgrpo_jax.runtime.config_checks import load_config_file


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.seed = 0  # Seeds the sampling keys: same seed, same transcripts.
  config.model = "smollm2-135m-instruct"  # Main agent's model (name, directory or .gguf).
  config.sub_model = config_dict.placeholder(str)  # Sub-agent's model (None: the main agent's).

  config.agents = agents_config()  # The team (mgrpo_jax/agents/team.py).
  config.agents.main.max_turns = 4  # Main-agent turns before it must have answered.
  config.agents.main.max_new_tokens = 128  # Tokens per main-agent turn.
  config.agents.main.context_tokens = 2048  # Main-agent context budget.
  config.agents.main.rows = 16  # Main conversations live at once.
  config.agents.sub.max_turns = 3  # Sub-agent turns before it must have reported.
  config.agents.sub.max_new_tokens = 128  # Tokens per sub-agent turn.
  config.agents.sub.context_tokens = 2048  # Sub-agent context budget.
  config.agents.sub.rows = 16  # Sub-agent conversations live at once.
  config.agents.visit_chars = 600  # Characters of page text a visit returns.
  config.agents.temperature = 0.3  # Sampling temperature of every agent (0 = greedy).
  # The untrained 135M model does not start the protocol by itself: its first
  # turn is seeded with the opening of a tool call, which it completes.
  config.agents.main.first_turn_prefix = (  # Main agent's seeded first-turn opening.
      '<tool_call>{"name": "delegate", "arguments": {"task": "')
  config.agents.sub.first_turn_prefix = (  # Sub-agent's seeded first-turn opening.
      '<tool_call>{"name": "search", "arguments": {"query": "')

  config.tools = load_config_file(  # The sub-agent's search / visit backend (configs/tools.py comments every field).
      str(pathlib.Path(__file__).with_name("tools.py")))

  config.eval = ml_collections.ConfigDict()
  config.eval.rollouts = 2  # Rollouts per question (K of avg@K / pass@K).
  config.eval.limit = 4  # First questions evaluated (0: all of them).
  config.eval.split = "test"  # Split of the synthetic world (files ignore it).

  config.reward = ml_collections.ConfigDict()
  config.reward.preset = "mgrpo"  # Reward weights reported as main_reward.

  config.world = ml_collections.ConfigDict()  # The synthetic world (data/world.py).
  config.world.num_entities = 300  # Entities, one page each.
  config.world.train_questions = 1000  # Questions in the train split.
  config.world.validation_questions = 100  # Questions in the validation split.
  config.world.test_questions = 200  # Questions in the test split.
  config.world.max_hops = 4  # Questions need 1..max_hops hops.
  config.world.seed = 0  # Seeds the world (entities, pages, questions).
  return config
