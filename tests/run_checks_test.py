"""check_run_config: every field of configs/default.py, each bad value
refused with one line naming the field, the value and what was expected."""

import math
import pathlib
import re

import ml_collections
import pytest

from trainer_test_utils import tiny_config
from mgrpo_jax.train import trainer
from mgrpo_jax.runtime.config_checks import ConfigError, load_config_file
from mgrpo_jax.train.run_checks import check_run_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT = load_config_file(str(ROOT / "configs" / "default.py"))


def default(**fields):
  """configs/default.py, not type-safe (so a test can set a float into an
  int field), with dotted `fields` set (e.g. {"train.steps": 0})."""
  config = ml_collections.ConfigDict(DEFAULT.to_dict(), type_safe=False)
  for path, value in fields.items():
    *parents, name = path.split(".")
    node = config
    for part in parents:
      node = node[part]
    node[name] = value
  return config


def refused(config, match, role="all"):
  with pytest.raises(ConfigError, match=match) as error:
    check_run_config(config, role)
  assert "\n" not in str(error.value)
  return str(error.value)


BAD = [
    ("seed", -1), ("seed", 1.5), ("task", "toy_delegation"), ("mode", "both"),
    ("run_dir", ""), ("run_dir", None),
    ("train.steps", 0), ("train.questions_per_step", 0),
    ("train.group_size", 1), ("train.eval_every", 0),
    ("train.eval_questions", 0), ("train.eval_samples", -1),
    ("train.staleness", "two_steps"),
    ("learner.main.learning_rate", 0.0),
    ("learner.main.learning_rate", math.nan),
    ("learner.sub.warmup_steps", -1), ("learner.main.total_steps", 0),
    ("learner.main.weight_decay", -0.1), ("learner.sub.clip_norm", 0.0),
    ("learner.main.b1", 1.0), ("learner.sub.b2", -0.1),
    ("learner.main.inner_epochs", 0), ("learner.main.micro_batch", 2.5),
    ("learner.sub.min_len", 0), ("learner.main.max_len", 32),
    ("learner.main.eps_low", 1.0), ("learner.sub.eps_high", -0.1),
    ("learner.main.beta", -1.0), ("learner.sub.aggregation", "mean"),
    ("learner.main.off_policy", "tokens"), ("learner.sub.is_cap", 0.5),
    ("reward.preset", "mine"), ("reward.w_fmt", -1.0),
    ("reward.v_exp", "high"), ("reward.v_main", math.inf),
    ("advantage.scale", "zscore"), ("advantage.eps", -1.0),
    ("advantage.sub_group_by", "agent"),
    ("align.d_max", -1), ("align.fill", "zeros"),
    ("agents.temperature", -0.1), ("agents.temperature", math.inf),
    ("agents.temperature", "hot"), ("agents.answer_reserve", "x"),
    ("agents.main.context_tokens", 100),
    ("agents.top_p", 0.0), ("agents.top_p", 1.5), ("agents.top_k", -1),
    ("agents.top_k", 1.5), ("agents.main.rows", 0),
    ("agents.sub.max_new_tokens", 0), ("agents.prompt_style", "long"),
    ("agents.search_k", 0), ("agents.reason_tool", "yes"),
    ("agents.strict_format", 1), ("agents.sub.first_turn_prefix", None),
    ("agents.sampler_dtype", "float16"), ("agents.sampler_dtype", None),
    ("world.num_entities", 5), ("world.train_questions", 0),
    ("world.validation_questions", 0), ("world.test_questions", -1),
    ("world.max_hops", 5), ("world.seed", -1),
    ("model.name", "smollm3"), ("model.vocab_size", 100),
    ("model.hidden_size", 0), ("model.num_layers", 0),
    ("mesh.share", "yes"), ("mesh.main.devices", 0),
    ("mesh.sub.devices", 1.0), ("mesh.main.device_ids", (0, 0)),
    ("checkpoint.every", 0), ("checkpoint.max_to_keep", 0),
    ("store.root", 3), ("store.root", "s3://bucket/run"),
    ("store.timeout_s", 0.0), ("store.keep_weights", 0),
    ("sft.steps", -1), ("sft.batch_size", 0), ("sft.questions", 0),
    ("sft.learning_rate", 0.0), ("sft.noise", 1.5),
    ("sft.early_answer", -0.2), ("sft.cache", "yes"),
    ("sft.lazy_report", 1.5), ("train.test_questions", -1),
    ("train.test_questions", 33),  # The default world has 32.
]


def test_the_default_config_passes_for_every_role():
  for role in ("all", "main", "sub"):
    check_run_config(default(), role)


@pytest.mark.parametrize("path,bad", BAD, ids=[f"{p}={b!r}" for p, b in BAD])
def test_bad_value_is_named_with_what_was_expected(path, bad):
  message = refused(default(**{path: bad}),
                    "^" + re.escape(f"config.{path}={bad!r}: expected"))
  assert message.endswith(".")


def test_values_whose_message_names_the_section():
  refused(default(**{"model.hidden_size": 130}),
          r"^config.model: .*hidden_size=130 is not a multiple of num_heads")
  config = default()
  config.world.num_entites = 40
  refused(config, r"^config.world: .*unexpected keyword.*'num_entites'")
  config = default()
  config.learner.main.clip = 1.0
  refused(config, r"^config.learner.main: .*unexpected keyword.*'clip'")
  config = default()
  config.reward.w_zzz = 1.0
  refused(config, r"^config.reward.w_zzz: no such reward weight; expected "
          r"one of \[.*'w_fmt'.*\]")
  refused(default(**{"mesh.sub.shape": "tp:3"}),
          r"^config.mesh.sub.shape='tp:3': expected axis sizes whose "
          r"product \(3\) equals devices=1")
  # Data parallel: a batch's rows split evenly over each data axis.
  four_way = {"mesh.sub.devices": 4, "mesh.sub.shape": "fsdp:4"}
  refused(default(**four_way, **{"learner.sub.micro_batch": 6}),
          r"^config.learner.sub.micro_batch=6: expected a multiple of 4, "
          r"the size of config.mesh.sub's data axis 'fsdp'")
  refused(default(**four_way, **{"learner.sub.micro_batch": 8,
                                 "sft.batch_size": 10}),
          r"^config.sft.batch_size=10: expected a multiple of 4")
  check_run_config(default(**four_way, **{"learner.sub.micro_batch": 8,
                                          "sft.batch_size": 16}), "all")
  # Only the agents the process trains: --role=main never splits sub rows.
  check_run_config(default(**four_way, **{"learner.sub.micro_batch": 6}),
                   "main")
  refused(default(**{"mesh.main.device_ids": (1, 2)}),
          r"^config.mesh.main.device_ids=\(1, 2\): expected None or 1 "
          "distinct device ids")


def test_a_bfloat16_sampler_needs_each_learner_to_correct_its_gap():
  bf16 = {"agents.sampler_dtype": "bfloat16"}
  check_run_config(default(**bf16), "all")  # off_policy "token" (default)
  check_run_config(default(**bf16, **{"learner.sub.off_policy": "sequence"}),
                   "all")
  for agent in ("main", "sub"):
    refused(default(**bf16, **{f"learner.{agent}.off_policy": "none"}),
            rf"^config.learner.{agent}.off_policy='none': expected 'token' "
            r"or 'sequence' with agents.sampler_dtype='bfloat16' \(the ")
  check_run_config(default(**{"learner.main.off_policy": "none"}), "all")


def test_the_list_of_known_model_names_is_given():
  message = refused(default(**{"model.name": "smollm3"}), "smollm3")
  assert "'smollm2-135m-instruct'" in message and ".gguf" in message


def test_model_names_that_load(tmp_path):
  check_run_config(default(**{"model.name": "smollm2-135m-instruct"}), "all")
  checkpoint = tmp_path / "hf"
  checkpoint.mkdir()
  refused(default(**{"model.name": str(checkpoint)}), "config.model.name=")
  (checkpoint / "config.json").write_text("{}")
  check_run_config(default(**{"model.name": str(checkpoint)}), "all")
  gguf = tmp_path / "m.gguf"
  gguf.write_bytes(b"")
  check_run_config(default(**{"model.name": str(gguf)}), "all")
  # Tiny's sizes are not read when the model is loaded.
  check_run_config(default(**{"model.name": str(gguf),
                              "model.hidden_size": 0}), "all")


def test_roles_and_the_modes_that_train_a_sub_agent():
  refused(default(), r"^--role='both': expected one of", role="both")
  refused(default(mode="frozen_sub"), "^--role=sub with config.mode="
          "'frozen_sub'", role="sub")
  check_run_config(default(mode="frozen_sub"), "main")
  # The single agent has no sub-agent mesh: its section is not read.
  check_run_config(default(**{"mode": "single", "mesh.sub.devices": 0}),
                   "all")


def test_a_refused_config_writes_nothing(tmp_path):
  """trainer.run checks before the store, the checkpoints and the warm
  start: a bad value leaves no trace of the run."""
  config = tiny_config(tmp_path)
  config.learner.sub.is_cap = 0.5
  with pytest.raises(ConfigError, match="config.learner.sub.is_cap=0.5"):
    trainer.run(config, log=lambda m: None)
  assert not (tmp_path / "run").exists()
  assert list(tmp_path.iterdir()) == []


def test_branch_groups_need_a_pair_of_attempts(tmp_path):
  config = tiny_config(tmp_path)
  config.advantage.sub_group_by = "branch"
  with pytest.raises(ConfigError, match="advantage.sub_group_by='branch'.*"
                     "sub_branches=1 .*no pair"):
    check_run_config(config, "all")
  config.agents.sub_branches = 2
  check_run_config(config, "all")
  config.agents.sub_branches = 3  # d_max 2 cannot hold 3 attempts.
  with pytest.raises(ConfigError, match="align.d_max=2.*a multiple of "
                     "config.agents.sub_branches=3.*e.g. 6"):
    check_run_config(config, "all")
  config.align.d_max = 6
  check_run_config(config, "all")
  config.agents.sub_branches = 0
  with pytest.raises(ConfigError, match="sub_branches=0"):
    check_run_config(config, "all")
