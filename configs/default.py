"""The default run: M-GRPO of a tiny from-scratch team on the synthetic world.

`python -m mgrpo_jax.main --config configs/default.py` (CPU-sized): a
tokenizer is trained on the world, one tiny Llama is warm-started by SFT on
oracle demonstrations of both agents (cached for later runs; in 60% of the
two-hop questions the demonstrated planner answers after the first hop), the
main agent and the sub-agent each get their own copy, and both train with
M-GRPO, each on its own mesh: the planner learns to delegate the second hop.
configs/frozen_sub.py, single_agent.py and smollm2.py start from this file.
Every field can be overridden, e.g. `--config.train.steps=5`.
"""

import pathlib

import ml_collections
from ml_collections import config_dict

from mgrpo_jax.agents.team import agents_config
from mgrpo_jax.runtime.config_checks import load_config_file
from mgrpo_jax.runtime.meshes import agent_config as agent_mesh


def _learner(learning_rate: float) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.learning_rate = learning_rate  # AdamW peak learning rate.
  c.warmup_steps = 0  # Linear warm-up steps.
  c.total_steps = 1000  # Cosine decay length (to 10% of the peak).
  c.weight_decay = 0.0  # AdamW weight decay.
  c.clip_norm = 1.0  # Global gradient-norm clip.
  c.b1 = 0.9  # Adam beta1.
  c.b2 = 0.999  # Adam beta2.
  c.inner_epochs = 1  # mu: updates per batch of rollouts.
  c.micro_batch = 16  # Sequences per forward/backward pass.
  c.min_len = 64  # Smallest padded sequence length (buckets x1, 1.5, 2, 3, ... up to max_len).
  c.max_len = 1024  # Longest sequence trained on.
  c.eps_low = 0.2  # Lower clip: ratio >= 1 - eps_low.
  c.eps_high = 0.28  # Upper clip: ratio <= 1 + eps_high.
  c.beta = 0.0  # KL weight towards the initial policy.
  c.log_ref_kl = False  # Also log ref_kl (KL to the initial policy) when beta = 0: a copy of the initial weights and one more forward pass per step.
  c.aggregation = "token_mean"  # "token_mean" (DAPO), "sequence_mean" (GRPO), "sequence_sum_norm" (Dr. GRPO: / (sequences x max_len)).
  c.off_policy = "token"  # Stale-data correction: "none", "token" or "sequence" truncated importance weights (decoupled PPO, Hilton et al. 2022; AReaL).
  c.is_cap = 2.0  # Truncation cap of the importance weights (>= 1).
  c.router_aux_weight = 0.0  # Mixture-of-experts models only: weight of the router's load-balancing loss (Switch Transformer / Hugging Face's, over the trained tokens; 0 as peers do in RL fine-tuning: logged as <agent>/router_aux_loss, not trained on).
  c.lora_rank = 0  # Train only low-rank adapters of this rank on the frozen weights (0: every weight trains); checkpoints and the store then carry only the adapters (models/lora.py).
  c.lora_alpha = 16.0  # The adapters' scale is lora_alpha / lora_rank.
  c.lora_targets = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")  # Matrices adapted (a mixture of experts: "wq", "wk", "wv", "wo", "router").
  c.remat = False  # Recompute each layer's activations in the backward pass (jax.checkpoint) instead of keeping them: a SmolLM2 update of 4 x 1024 tokens needs 4.4 GiB of temporaries instead of 18.9 (python -m mgrpo_jax.bench.memory), for a slower backward pass.
  return c


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()
  config.seed = 0  # Seeds every PRNG key and the data order: same seed, same run.
  config.task = "agents"  # What main.py trains: "agents" (this) or "toy_delegation".
  config.mode = "mgrpo"  # "mgrpo" (both train), "frozen_sub", "single" (baselines), "frozen_main" (only the sub-agents train: a positive control).
  config.run_dir = "runs/default"  # Metrics, checkpoints and (default) the store.

  config.model = ml_collections.ConfigDict()
  config.model.name = "tiny"  # "tiny" (from scratch) or a model name / directory.
  config.model.vocab_size = 2048  # Tiny tokenizer's vocabulary (trained on the world; ~1760 ids hold every word, so a name is 1-2 ids).
  config.model.hidden_size = 128  # Tiny model width.
  config.model.num_layers = 2  # Tiny model depth.

  config.sft = ml_collections.ConfigDict()
  config.sft.steps = 700  # SFT warm-start steps on the demonstrations (0: none).
  config.sft.batch_size = 8  # Sequences per SFT step.
  config.sft.learning_rate = 6e-3  # SFT AdamW learning rate (3e-3 left seed 1 short of learning to copy names in 700 steps).
  config.sft.noise = 0.0  # Share of oracle turns with a controlled mistake (wrong names slow the tiny model's learning to copy).
  config.sft.early_answer = 0.6  # Share of multi-hop demonstrations whose planner answers after the first hop (a planner M-GRPO must teach to decompose).
  config.sft.lazy_report = 0.0  # Share of sub-agent hops demonstrated without the visit: the report comes from the cut-short search snippet, so it is mostly "unknown" (a sub-agent M-GRPO must teach to read the page; configs/reproduce.py).
  config.sft.questions = 250  # Train questions the oracle demonstrates (the first ones).
  config.sft.cache = True  # Reuse the warm start of an earlier run with the same settings (train/warm_start.py).
  config.sft.worlds = 0  # Demonstrate this many other worlds instead of the run's own train questions (data/demo_worlds.py): no fact the run trains or tests on is in the warm start, so it must be read (0: the run's own questions, whose facts the model can memorise).
  config.sft.world_seed = 1000000  # Seed of the first demonstration world (run seed s uses world_seed + s * worlds + i): far from every world.seed a suite uses.
  config.sft.demonstrations = "oracle"  # Who writes them: "oracle" (plays the synthetic world's relations), "gold" (any data: each record's decomposition, e.g. MuSiQue's, or supporting pages, e.g. HotpotQA's) or the path of a JSONL of conversations (agents/demo_file.py).

  config.data = ml_collections.ConfigDict()  # Where the questions come from (train/data.py).
  config.data.train = "synthetic"  # "synthetic" (config.world's train split) or a question file: MuSiQue, HotpotQA, GAIA-style JSON/JSONL, or JSONL of {"question", "answer"}.
  config.data.validation = "synthetic"  # The same for validation (eval/*: its first train.eval_questions).
  config.data.test = "synthetic"  # The same for the held-out test (test/*: its first train.test_questions).
  config.data.format = ""  # The files' format ("": detected from each file): musique, hotpotqa, gaia, webwalkerqa, xbench, qa.
  config.data.train_questions = 0  # First train questions used (0: all of them).
  config.data.corpus = "files"  # What search / visit read: "files" (the pages the splits carry; the world's for "synthetic") or a JSONL of {"id", "title", "text"} pages.

  config.tools = load_config_file(  # The search / visit backend: local pages or a web API (configs/tools.py comments every field).
      str(pathlib.Path(__file__).with_name("tools.py")))

  config.world = ml_collections.ConfigDict()  # The synthetic world (data/world.py).
  config.world.num_entities = 150  # Entities, one page each.
  config.world.train_questions = 420  # Questions in the train split (the warm start demonstrates the first sft.questions; M-GRPO samples all).
  config.world.validation_questions = 64  # Questions in the validation split.
  config.world.test_questions = 32  # Questions in the test split.
  config.world.max_hops = 2  # Questions need 1..max_hops hops.
  config.world.seed = 0  # Seeds the world.

  config.agents = agents_config()  # The team (agents/team.py).
  config.agents.prompt_style = "brief"  # ~40-id system prompts: the tiny model learns the protocol from the demonstrations.
  config.agents.main.max_turns = 4  # Main-agent turns before it must answer.
  config.agents.main.max_new_tokens = 64  # Tokens per main-agent turn.
  config.agents.main.context_tokens = 1024  # Main-agent context budget.
  config.agents.main.rows = 64  # Main conversations live at once.
  config.agents.sub.max_turns = 4  # Sub-agent turns before it must report.
  config.agents.sub.max_new_tokens = 64  # Tokens per sub-agent turn.
  config.agents.sub.context_tokens = 1024  # Sub-agent context budget.
  config.agents.sub.rows = 64  # Sub-agent conversations live at once.
  config.agents.verifier.max_turns = 3  # Verifier turns before it must give its verdict (when in sub_kinds).
  config.agents.verifier.max_new_tokens = 64  # Tokens per verifier turn.
  config.agents.verifier.context_tokens = 1024  # Verifier context budget.
  config.agents.verifier.rows = 64  # Verifier conversations live at once.
  config.agents.visit_chars = 200  # Characters of page text a visit returns.
  config.agents.snippet_chars = 60  # Characters of each search hit's snippet.
  config.agents.temperature = 0.6  # Sampling temperature of the rollouts.
  config.agents.search_k = 2  # Results per search.
  config.agents.answer_reserve = 32  # Context ids kept free for a final answer.

  config.train = ml_collections.ConfigDict()
  config.train.steps = 25  # M-GRPO steps.
  config.train.questions_per_step = 8  # B: questions per step.
  config.train.group_size = 8  # K: rollouts per question (the GRPO group).
  config.train.rollout_shards = 0  # The B questions rolled out in this many ranges, each with its own key (0: one per process of the main role); runs with equal shards sample alike on any number of processes.
  config.train.staleness = "sync"  # "sync" or "one_step" (sub weights one step behind).
  config.train.eval_every = 5  # Greedy validation accuracy every this many steps.
  config.train.eval_questions = 64  # Validation questions evaluated.
  config.train.eval_samples = 2  # Also this many sampled rollouts per validation question (eval/sampled_accuracy; 0: greedy only).
  config.train.scripted = ""  # An agent the oracle plays, never trained (train/scripted.py): "sub" (a perfect reader, with mode frozen_sub) or "main" (a perfect planner, with mode frozen_main): the positive controls ("": none).
  config.train.counterfactual_questions = 0  # The reader's check (data/counterfactual.py): also greedy on this many validation questions over pages whose last-hop fact was changed (eval/counterfactual_follows: answers that follow the page; _recalls: that give the old answer; 0: none).
  config.train.test_questions = 0  # Also greedy on this many held-out test questions at each evaluation (test/*: logged, never used for a choice; 0: none).

  config.learner = ml_collections.ConfigDict()
  config.learner.main = _learner(1e-4)  # Main agent's optimizer and loss.
  config.learner.sub = _learner(1e-4)  # Sub-agent's optimizer and loss.
  config.learner.verifier = _learner(1e-4)  # The verifier kind's (when in agents.sub_kinds).

  config.advantage = ml_collections.ConfigDict()
  config.advantage.scale = "group"  # "group" (GRPO), "batch", "none" (Dr. GRPO).
  config.advantage.eps = 1e-6  # Added to the std before dividing.
  config.advantage.sub_group_by = "question"  # Sub-agent groups: "question" (the paper's: every call of a question's K rollouts), "rollout", "subtask" (the calls of a question's K rollouts that did the same gold sub-question, else the same i-th delegation) or "branch" (the agents.sub_branches attempts of one delegation, from the same state).

  config.align = ml_collections.ConfigDict()
  config.align.d_max = 2  # Sub-agent slots per rollout (D_max; 0: alignment off, an ablation: one row per call, a batch shape that changes every step).
  config.align.verifier_d_max = 1  # The verifier kind's D_max (when in agents.sub_kinds).
  config.align.fill = "random"  # Fill free slots with "random" or "best" duplicates.

  config.reward = ml_collections.ConfigDict()
  config.reward.preset = "mgrpo"  # Named weights: "mgrpo", "outcome_only", "with_expert".
  config.reward.w_fmt = config_dict.placeholder(float)  # Main format weight (None: preset's).
  config.reward.w_cor = config_dict.placeholder(float)  # Main correctness weight (None: preset's).
  config.reward.v_fmt = config_dict.placeholder(float)  # Sub format weight (None: preset's).
  config.reward.v_main = config_dict.placeholder(float)  # Sub weight of main's outcome (None: preset's).
  config.reward.v_exp = config_dict.placeholder(float)  # Sub expert-score weight (None: preset's).

  config.mesh = ml_collections.ConfigDict()  # Devices per agent (runtime/meshes.py).
  config.mesh.share = True  # True: agents may use the same devices (one CPU device here); False on TPU/GPU: disjoint slices.
  config.mesh.main = agent_mesh()  # The main agent (planner); takes the first devices.
  config.mesh.sub = agent_mesh()  # The sub-agent (tool executor); the next devices.
  config.mesh.verifier = agent_mesh()  # The verifier kind's devices (when in agents.sub_kinds).

  config.runtime = ml_collections.ConfigDict()  # Compiled programs (train/compiled.py, sampling/shapes.py).
  config.runtime.shapes = "closed"  # "closed": every sampler's and learner's shapes from a short list, all compiled at start-up through the persistent cache (nothing after the first step); "open": padded sizes on ladders, each program compiled when a step first needs it (fewer programs for a short run).
  config.runtime.strict_shapes = False  # With shapes="closed": a call outside the set stops the run (ShapeError naming the program and shape) instead of compiling it.
  config.runtime.decode_row_floor = 8  # closed: fewest rows a decode call pads to (a decode step reads every weight whatever its rows).
  config.runtime.decode_windows = 4  # closed: decode cache windows, the largest this many powers of two up to agents.<agent>.context_tokens.
  config.runtime.prefill_windows = 2  # closed: prefill and cache-copy windows, likewise.
  config.runtime.prefill_chunk = 256  # closed: most tokens a conversation prefills per call (longer prompts take several).
  config.runtime.compile_threads = 2  # Programs compiled at once at start-up.

  config.store = ml_collections.ConfigDict()
  config.store.root = ""  # Shared store: a directory or gs://bucket/prefix ("": run_dir/store).
  config.store.timeout_s = 600.0  # How long one side waits for the other.
  config.store.keep_weights = 3  # Newest sub-agent weight versions kept besides those a resume from the kept checkpoints needs.

  config.checkpoint = ml_collections.ConfigDict()
  config.checkpoint.every = 5  # Save each agent every this many steps (and the last).
  config.checkpoint.max_to_keep = 3  # Newest checkpoints kept per agent.
  return config
