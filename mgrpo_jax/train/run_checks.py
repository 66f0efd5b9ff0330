"""Every field of a training config (configs/default.py), checked at once.

`check_run_config(config, role)` runs first in the trainer (`trainer.run`,
via `trainer.check_config`) and in `mgrpo_jax.main`, before any file is
written and before the warm start: a bad value stops the run in seconds with
one line naming the field, the value and what was expected (a ConfigError),
not minutes later with a traceback. It reads the config only: no device, no
model, no world is built. What needs the devices (enough of them for the
meshes) is checked by `meshes.agent_meshes`, the next thing the trainer does.
"""

from __future__ import annotations

import os
import pathlib

import ml_collections

from mgrpo_jax.models import tiny as tiny_model
from mgrpo_jax import core
from mgrpo_jax.agents import team
from mgrpo_jax.core.alignment import FILLS
from mgrpo_jax.core.importance import OFF_POLICY
from mgrpo_jax.agents.web import check_tools_config
from mgrpo_jax.data import loading as data_loading
from mgrpo_jax.data import world
from mgrpo_jax.models import loading
from mgrpo_jax.models.sharding import BATCH_AXIS
from mgrpo_jax.train.scripted import MODE_OF, SCRIPTED
from mgrpo_jax.runtime import meshes
from mgrpo_jax.runtime.config_checks import (ConfigError, boolean, choice,
                                              fail, get, integer, number,
                                              string)
from mgrpo_jax.sampling.precision import WEIGHTS_DTYPES
from mgrpo_jax.train import adapters, compiled
from mgrpo_jax.train import data as train_data
from mgrpo_jax.train.learner import LearnerConfig
from mgrpo_jax.train.warm_start import DEMONSTRATIONS, demonstration_source

TASK = "agents"  # The `config.task` that mgrpo_jax.main trains with this.
MODES = ("mgrpo", "frozen_sub", "single", "frozen_main")
ROLES = ("all", "main")  # And each sub-agent kind of config.agents.sub_kinds.
STALENESS = ("sync", "one_step")
SUB_GROUP_BY = ("question", "rollout", "subtask", "branch")
TINY = "tiny"  # config.model.name of the from-scratch team.


def check_run_config(config: ml_collections.ConfigDict, role: str) -> None:
  """Raises ConfigError (one line: field, value, expectation) for the first
  unusable field of a training config run as `role`."""
  kinds = _kinds(config)
  _run(config, role, kinds)
  _train(config)
  for agent in ("main", *kinds):
    _learner(config, agent)
  _sampler(config, kinds)
  adapters.check_share_base(config, {"mgrpo": ("main", *kinds),
                                    "frozen_main": kinds}.get(
                                        config.mode, ("main",)))
  _reward(config)
  integer(config, "align.d_max", minimum=0)  # 0: alignment off.
  for kind in kinds:
    if kind != "sub":
      integer(config, f"align.{kind}_d_max", minimum=0)
  choice(config, "align.fill", FILLS)
  choice(config, "advantage.scale", core.ADVANTAGE_SCALES.names())
  number(config, "advantage.eps", minimum=0.0)
  group_by = choice(config, "advantage.sub_group_by", SUB_GROUP_BY)
  _agents(config)
  if group_by == "branch" and config.agents.get("sub_branches", 1) < 2:
    fail("advantage.sub_group_by", group_by, "another grouping with "
         f"config.agents.sub_branches={config.agents.get('sub_branches', 1)}"
         " (a group of one attempt per delegation has no pair to compare: "
         "every advantage would be 0); or sub_branches >= 2")
  branches = config.agents.get("sub_branches", 1)
  d_max = config.align.d_max
  if group_by == "branch" and d_max and d_max % branches:
    fail("align.d_max", d_max, f"a multiple of config.agents.sub_branches="
         f"{branches} with advantage.sub_group_by='branch' (the alignment "
         "keeps a delegation's attempts together: e.g. "
         f"{2 * branches} for two delegations a rollout; 0: alignment off)")
  # After the agents' budgets: the closed set is derived from them.
  compiled.check_runtime(config, ("main", *kinds))
  _world(config)
  _data(config)
  _tools(config)
  _model(config)
  _sft(config)
  _mesh(config, kinds, role)
  integer(config, "checkpoint.every", minimum=1)
  integer(config, "checkpoint.max_to_keep", minimum=1)
  _store(config)


def _kinds(config) -> tuple[str, ...]:
  """The sub-agent kinds the run trains or samples (none for "single"),
  each with its agents, learner and mesh sections."""
  try:
    team.check_kinds(config.agents)
  except ValueError as e:
    raise ConfigError(str(e)) from e
  if get(config, "mode") == "single":
    return ()
  kinds = tuple(config.agents.sub_kinds)
  for kind in kinds:
    for section in ("learner", "mesh"):
      if kind not in config[section]:
        fail(f"{section}", sorted(config[section].keys()), f"a section "
             f"config.{section}.{kind} for the sub-agent kind {kind!r} of "
             "config.agents.sub_kinds")
  return kinds


def _run(config, role: str, kinds: tuple[str, ...]) -> None:
  choice(config, "task", [TASK])
  integer(config, "seed", minimum=0)
  mode = choice(config, "mode", MODES)
  roles = [*ROLES, *(kinds or config.agents.sub_kinds)]
  if role not in roles:
    raise ConfigError(f"--role={role!r}: expected one of {roles} (a "
                      "sub-agent kind's role trains that kind).")
  if role not in ("all", "main") and mode not in ("mgrpo", "frozen_main"):
    raise ConfigError(f"--role={role} with config.mode={mode!r}: only modes "
                      "'mgrpo' and 'frozen_main' train a sub-agent.")
  string(config, "run_dir", empty=False)


def _train(config) -> None:
  for field in ("steps", "questions_per_step", "eval_every", "eval_questions"):
    integer(config, f"train.{field}", minimum=1)
  # A group of one rollout has every advantage 0: nothing would learn.
  integer(config, "train.group_size", minimum=2)
  integer(config, "train.eval_samples", minimum=0)
  integer(config, "train.rollout_shards", minimum=0)
  choice(config, "train.staleness", STALENESS)
  if "scripted" in config.train:
    _scripted(config)
  if "counterfactual_questions" in config.train:
    integer(config, "train.counterfactual_questions", minimum=0,
            maximum=get(config, "train.eval_questions"))


def _scripted(config) -> None:
  """A scripted agent (train/scripted.py) is never trained: its mode is
  the one that leaves it out, on the generated world's questions."""
  scripted = choice(config, "train.scripted", SCRIPTED)
  if not scripted:
    return
  if get(config, "mode") != MODE_OF[scripted]:
    fail("train.scripted", scripted, f"'' with config.mode="
         f"{get(config, 'mode')!r} (a scripted {scripted} agent is never "
         f"trained: config.mode={MODE_OF[scripted]!r})")
  if "data" in config and not train_data.is_synthetic(config):
    fail("train.scripted", scripted, "'' with data from files (the scripted "
         "agents play the generated world's questions and pages)")


def _learner(config, agent: str) -> None:
  p = f"learner.{agent}"
  number(config, f"{p}.learning_rate", minimum=0.0, open_min=True)
  integer(config, f"{p}.warmup_steps", minimum=0)
  integer(config, f"{p}.total_steps", minimum=1)
  number(config, f"{p}.weight_decay", minimum=0.0)
  number(config, f"{p}.clip_norm", minimum=0.0, open_min=True)
  for beta in ("b1", "b2"):
    number(config, f"{p}.{beta}", minimum=0.0, maximum=1.0, open_max=True)
  for field in ("inner_epochs", "micro_batch", "min_len"):
    integer(config, f"{p}.{field}", minimum=1)
  integer(config, f"{p}.max_len", minimum=get(config, f"{p}.min_len"))
  number(config, f"{p}.eps_low", minimum=0.0, maximum=1.0, open_max=True)
  number(config, f"{p}.eps_high", minimum=0.0)
  number(config, f"{p}.beta", minimum=0.0)
  boolean(config, f"{p}.log_ref_kl")
  choice(config, f"{p}.aggregation", core.LOSS_AGGREGATIONS.names())
  choice(config, f"{p}.off_policy", OFF_POLICY)
  number(config, f"{p}.is_cap", minimum=1.0)
  try:  # Also refuses fields LearnerConfig does not have.
    LearnerConfig(**config.learner[agent].to_dict())
  except (TypeError, ValueError) as e:
    raise ConfigError(f"config.{p}: {e}") from e


def _sampler(config, kinds: tuple[str, ...]) -> None:
  """A sampler whose weights are rounded (bfloat16) samples from another
  policy than the float32 learner scores: each learner must correct that
  gap as stale data (the truncated importance weight of `off_policy`)."""
  dtype = choice(config, "agents.sampler_dtype", WEIGHTS_DTYPES)
  if dtype == "float32":
    return
  for agent in ("main", *kinds):
    if get(config, f"learner.{agent}.off_policy") == "none":
      fail(f"learner.{agent}.off_policy", "none", "'token' or 'sequence' "
           f"with agents.sampler_dtype={dtype!r} (the sampler's log-probs "
           "differ from the learner's float32 ones, and 'none' would leave "
           "that gap uncorrected)")


def _reward(config) -> None:
  weights = core.reward_weights(
      choice(config, "reward.preset", core.REWARD_PRESETS.names()))
  for name in config.reward.keys():
    if name == "preset":
      continue
    if name not in weights:
      raise ConfigError(f"config.reward.{name}: no such reward weight; "
                        f"expected one of {sorted(weights)}.")
    if config.reward[name] is not None:  # None: the preset's weight.
      number(config, f"reward.{name}", minimum=0.0)


def _agents(config) -> None:
  if get(config, "agents.layout") != "multi":  # Set from config.mode.
    fail("agents.layout", config.agents.layout, "'multi' in a training "
         "config (its layout follows config.mode: 'single' trains one agent "
         "with the tools)")
  number(config, "agents.temperature", minimum=0.0)  # 0: greedy.
  number(config, "agents.top_p", minimum=0.0, maximum=1.0, open_min=True)
  integer(config, "agents.top_k", minimum=0)
  integer(config, "agents.answer_reserve", minimum=1)
  boolean(config, "agents.reason_tool")
  boolean(config, "agents.strict_format")
  for side in ("main", *config.agents.sub_kinds):
    prefix = string(config, f"agents.{side}.first_turn_prefix")
    if prefix and get(config, "sft.steps"):
      fail(f"agents.{side}.first_turn_prefix", prefix, "'' with a warm start "
           "(sft.steps > 0): the demonstrations teach the model to open "
           "the protocol itself")
  try:  # The rest: turns, budgets, prompt style (agents/team.py).
    team.check_agents_config(config.agents)
  except ValueError as e:
    raise ConfigError(str(e)) from e


def _world(config) -> None:
  integer(config, "world.num_entities", minimum=world.MIN_ENTITIES)
  # The trainer samples train questions and validates on validation ones.
  integer(config, "world.train_questions", minimum=1)
  integer(config, "world.validation_questions", minimum=1)
  integer(config, "world.test_questions", minimum=0)
  integer(config, "world.max_hops", minimum=1, maximum=world.MAX_HOPS)
  integer(config, "world.seed", minimum=0)
  # After the world's own fields: the bound is the test split's size (a
  # test file's size is known once it is read).
  synthetic_test = (get(config, "data.test") == world.SOURCE
                    if "data" in config else True)
  integer(config, "train.test_questions", minimum=0,
          maximum=config.world.test_questions if synthetic_test else None)
  try:  # Also refuses fields WorldConfig does not have.
    world.WorldConfig(**config.world.to_dict())
  except (TypeError, ValueError) as e:
    raise ConfigError(f"config.world: {e}") from e


def _data(config) -> None:
  """Each split is "synthetic" or an existing file, the corpus "files" or an
  existing file (their contents are read, and refused with the reader's
  message, by train/data.py before anything is written)."""
  if "data" not in config:
    return
  for split in train_data.SPLITS:
    value = string(config, f"data.{split}", empty=False)
    if value != world.SOURCE and not pathlib.Path(value).is_file():
      fail(f"data.{split}", value, f"'{world.SOURCE}' or the path of a "
           f"question file ({', '.join(data_loading.FORMATS)}); no such file")
  fmt = string(config, "data.format")
  if fmt and fmt not in data_loading.FORMATS:
    fail("data.format", fmt, f"'' (detected) or one of "
         f"{list(data_loading.FORMATS)}")
  integer(config, "data.train_questions", minimum=0)
  corpus = string(config, "data.corpus", empty=False)
  if corpus != train_data.FILES and not pathlib.Path(corpus).is_file():
    fail("data.corpus", corpus, f"'{train_data.FILES}' (the pages the data "
         "carries) or the path of a JSONL of {id, title, text} pages; no "
         "such file")


def _tools(config) -> None:
  """The backend; the web backend in training needs its key (or replay)."""
  if "tools" not in config:
    return
  try:
    backend = check_tools_config(config)
  except ValueError as e:
    raise ConfigError(str(e)) from e
  if backend != "web":
    return
  web = config.tools.web
  if not web.replay and not os.environ.get(web.key_env):
    fail("tools.web.replay", web.replay, f"True (answers from the cache "
         f"only) when the environment variable {web.key_env} (tools.web."
         "key_env) holding the search API's key is not set: training on "
         "'no API key' answers would teach nothing")
  if get(config, "sft.steps") and demonstration_source(config) in (
      DEMONSTRATIONS):
    fail("sft.demonstrations", demonstration_source(config), "sft.steps=0 "
         "with config.tools.backend='web' (the oracle's demonstrations "
         "visit the local pages by their ids; warm-start with "
         "tools.backend='local', or train a pretrained model without SFT)")


def _model(config) -> None:
  name = get(config, "model.name")
  if name == TINY:
    integer(config, "model.vocab_size",
            minimum=256 + len(tiny_model.SPECIAL_TOKENS))  # Bytes + specials.
    integer(config, "model.hidden_size", minimum=1)
    integer(config, "model.num_layers", minimum=1)
    try:
      tiny_model.tiny_model_config(config.model.vocab_size,
                             hidden_size=config.model.hidden_size,
                             num_layers=config.model.num_layers)
    except ValueError as e:
      raise ConfigError(f"config.model: {e}") from e
    return
  path = pathlib.Path(name).expanduser() if isinstance(name, str) else None
  if path is None or not (
      name in loading.REGISTRY or (path / "config.json").is_file()
      or (path.is_file() and path.suffix == ".gguf")):
    fail("model.name", name, f"'{TINY}', a registered model name "
         f"{sorted(loading.REGISTRY)}, a checkpoint directory holding "
         "config.json or a .gguf file")


def _mesh(config, kinds: tuple[str, ...], role: str) -> None:
  """The sections of the agents the mode trains (devices are counted, and
  overlapping device ids refused, by `meshes.agent_meshes`)."""
  boolean(config, "mesh.share")
  agents = ["main", *kinds]
  for agent in agents:
    p = f"mesh.{agent}"
    devices = integer(config, f"{p}.devices", minimum=1)
    sizes = meshes.parse_shape(get(config, f"{p}.shape"), devices,
                               f"{p}.shape")
    # Up to the agent's devices in one process (meshes.sampler_mesh).
    integer(config, f"{p}.sampler_devices", minimum=0, maximum=devices)
    if role in ("all", agent):  # The agents this process trains.
      _rows_split(config, agent, sizes[BATCH_AXIS])
    ids = get(config, f"{p}.device_ids")
    if ids is not None and (
        not isinstance(ids, (tuple, list)) or len(ids) != devices
        or len(set(ids)) != devices or any(
            isinstance(i, bool) or not isinstance(i, int) or i < 0
            for i in ids)):
      fail(f"{p}.device_ids", ids, f"None or {devices} distinct device ids "
           f"(integers >= 0), one per device of config.{p}.devices")


def _rows_split(config, agent: str, ways: int) -> None:
  """A training batch's rows split evenly over the agent's data axis (its
  learner's micro-batch, and the warm start's batch: SFT trains each agent
  on its own mesh)."""
  fields = [f"learner.{agent}.micro_batch"]
  if get(config, "sft.steps"):
    fields.append("sft.batch_size")
  for field in fields:
    value = get(config, field)
    if value % ways:
      fail(field, value, f"a multiple of {ways}, the size of "
           f"config.mesh.{agent}'s data axis {BATCH_AXIS!r} (each device "
           "trains the same number of rows)")


def _sft(config) -> None:
  integer(config, "sft.steps", minimum=0)
  if "demonstrations" in config.sft:
    source = string(config, "sft.demonstrations", empty=False)
    if source not in DEMONSTRATIONS and not pathlib.Path(source).is_file():
      fail("sft.demonstrations", source, f"one of {list(DEMONSTRATIONS)} or "
           "the path of a JSONL of demonstration conversations "
           "(agents/demo_file.py); no such file")
  integer(config, "sft.batch_size", minimum=1)
  integer(config, "sft.questions", minimum=1)
  number(config, "sft.learning_rate", minimum=0.0, open_min=True)
  number(config, "sft.noise", minimum=0.0, maximum=1.0)
  number(config, "sft.early_answer", minimum=0.0, maximum=1.0)
  number(config, "sft.lazy_report", minimum=0.0, maximum=1.0)
  boolean(config, "sft.cache")
  if "worlds" in config.sft:
    worlds = integer(config, "sft.worlds", minimum=0,
                     maximum=get(config, "sft.questions"))
    integer(config, "sft.world_seed", minimum=0)
    if worlds and demonstration_source(config) != "oracle":
      fail("sft.worlds", worlds, "0 with config.sft.demonstrations="
           f"{demonstration_source(config)!r} (the demonstration worlds are "
           "played by the synthetic world's oracle: "
           "sft.demonstrations='oracle')")
    if worlds and "data" in config and get(config, "data.train") != (
        world.SOURCE):
      fail("sft.worlds", worlds, "0 with data from files (the demonstration "
           "worlds are generated worlds: they teach the protocol of the "
           "generated world's questions)")


def _store(config) -> None:
  root = string(config, "store.root")
  if "://" in root and not root.startswith("gs://"):
    fail("store.root", root, "'' (run_dir/store), a directory path or "
         "gs://bucket/prefix")
  number(config, "store.timeout_s", minimum=0.0, open_min=True)
  integer(config, "store.keep_weights", minimum=1)
