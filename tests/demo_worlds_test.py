"""Demonstration worlds: the warm start never shows a fact the run is
trained or tested on (data/demo_worlds.py, data/novelty.py)."""

import pytest

from mgrpo_jax.agents import tiny_team
from mgrpo_jax.data import demo_worlds
from mgrpo_jax.data.novelty import NOBODY, Novelty
from mgrpo_jax.data.records import DataError
from mgrpo_jax.data.task import TaskSet
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.models import tiny as tiny_model
from mgrpo_jax.runtime.config_checks import ConfigError
from mgrpo_jax.train import run_checks, warm_start
from mgrpo_jax.train.team_build import agents_section

from trainer_test_utils import tiny_config


def worlds_config(tmp_path, worlds=4):
  config = tiny_config(tmp_path)
  config.world.max_hops = 2
  config.world.train_questions = 16
  config.world.validation_questions = 8
  config.world.test_questions = 8
  config.sft.questions = 16
  config.sft.worlds = worlds
  return config


def demonstrated_text(config, tok):
  run_world = generate_world(WorldConfig(**config.world.to_dict()))
  own = TaskSet("sft", run_world.splits["train"][:config.sft.questions],
                run_world.documents)
  demos, what, _ = warm_start.demonstration_trajectories(
      config, own, tok, agents_section(config))
  return run_world, Novelty.of_trajectories(demos, tok), what


@pytest.fixture(scope="module")
def tok():
  world = generate_world(WorldConfig(num_entities=40, train_questions=16,
                                     validation_questions=0,
                                     test_questions=0, max_hops=2))
  return tiny_model.train_tokenizer(tiny_team.tokenizer_texts(world), 512)


def test_no_fact_of_the_run_is_in_any_demonstration(tmp_path, tok):
  config = worlds_config(tmp_path)
  run_world, novelty, what = demonstrated_text(config, tok)
  assert "4 demonstration worlds" in what and novelty.texts
  for split in ("train", "validation", "test"):
    for task in run_world.splits[split]:
      assert novelty.novel(task) is True, task.task_id
  # The check before compute agrees: no split's hop was demonstrated.
  played = warm_start.demonstrated_tasksets(config, TaskSet("sft", ()))
  assert len(played) == 4 and sum(len(t.tasks) for t in played) == 16
  assert demo_worlds.check_disjoint(run_world, played, setting="s") == {
      "test": 0.0, "validation": 0.0, "train": 0.0}


def test_the_run_s_own_questions_show_their_facts(tmp_path, tok):
  # The old warm start (sft.worlds=0) demonstrates the run's train
  # questions: their facts, and those of other splits on the pages it
  # visited, are in the text, so novelty can be False.
  config = worlds_config(tmp_path, worlds=0)
  config.sft.early_answer = 0.0  # Every hop demonstrated.
  run_world, novelty, what = demonstrated_text(config, tok)
  assert "demonstration worlds" not in what
  assert not any(novelty.novel(t) for t in run_world.splits["train"])
  held_out = run_world.splits["validation"] + run_world.splits["test"]
  assert 0 < sum(not novelty.novel(t) for t in held_out) < len(held_out)
  assert NOBODY.novel(run_world.splits["test"][0]) is True


def test_a_demonstration_world_equal_to_the_run_s_is_refused(tmp_path):
  config = worlds_config(tmp_path, worlds=2)
  config.sft.world_seed = config.world.seed  # World 0 is the run's world.
  with pytest.raises(DataError, match=r"sft.world_seed=0.*the test fact "
                     r"'.+' \(question 'synthetic-test-\d+'\) is in the "
                     "warm start's demonstrations"):
    warm_start.check_demonstrations(config, [], [])
  config.sft.world_seed = 1000000
  warm_start.check_demonstrations(config, [], [])


def test_train_overlap_over_the_cap_is_refused():
  world = generate_world(WorldConfig(num_entities=40, train_questions=16,
                                     validation_questions=0,
                                     test_questions=0, max_hops=2))
  own = [world.task_set("train")]
  with pytest.raises(demo_worlds.LeakError, match="100% of the train "
                     "questions' facts .* expected at most 10%"):
    demo_worlds.check_disjoint(world, own, setting="s")


def test_seeds_of_a_suite_never_share_a_demonstration_world():
  world = WorldConfig(num_entities=40)
  seeds = [c.seed for s in range(8) for c in demo_worlds.world_configs(
      world, worlds=5, questions=12, first_seed=10**6, run_seed=s)]
  assert len(set(seeds)) == 40 and min(seeds) == 10**6
  configs = demo_worlds.world_configs(world, worlds=5, questions=12,
                                      first_seed=10**6, run_seed=0)
  assert [c.train_questions for c in configs] == [3] * 5
  assert sum(len(t.tasks) for t in demo_worlds.tasksets(configs, 12)) == 12


def test_unseen_names_are_not_strings_of_bytes(tmp_path):
  # The tokenizer learns from many worlds' texts: a name of a world it never
  # saw costs about what a seen one does (one world's tokenizer merges its
  # own names whole and spells unseen ones out).
  config = worlds_config(tmp_path, worlds=8)
  config.sft.questions = 64
  config.world.num_entities = 60
  many = tiny_model.train_tokenizer(
      tiny_team.with_protocol(warm_start.tokenizer_texts(config)), 1024)
  seen = [generate_world(c)
          for c in warm_start.demonstration_world_configs(config)]
  unseen = [generate_world(WorldConfig(num_entities=60, train_questions=8,
                                       validation_questions=0,
                                       test_questions=0, seed=s))
            for s in (0, 1)]
  gap = (demo_worlds.name_token_lengths(many, unseen)
         / demo_worlds.name_token_lengths(many, seen))
  one = tiny_model.train_tokenizer(
      tiny_team.tokenizer_texts(unseen[0]), 1024)
  own_gap = (demo_worlds.name_token_lengths(one, unseen[1:])
             / demo_worlds.name_token_lengths(one, unseen[:1]))
  assert gap < 1.25 < own_gap


@pytest.mark.parametrize("field,value,expected", [
    ("sft.worlds", -1, "an integer in \\[0, 4\\]"),
    ("sft.worlds", 5, "an integer in \\[0, 4\\]"),
    ("sft.world_seed", -3, "an integer >= 0"),
    ("train.counterfactual_questions", 3, "an integer in \\[0, 2\\]"),
])
def test_bad_settings_are_named(tmp_path, field, value, expected):
  config = tiny_config(tmp_path)
  section, name = field.split(".")
  config[section][name] = value
  with pytest.raises(ConfigError, match=f"{field}={value}.*{expected}"):
    run_checks.check_run_config(config, "all")


def test_demonstration_worlds_need_the_oracle(tmp_path):
  config = tiny_config(tmp_path)
  config.sft.worlds = 2
  config.sft.demonstrations = "gold"
  with pytest.raises(ConfigError, match="sft.worlds=2.*expected 0 with "
                     "config.sft.demonstrations='gold'"):
    run_checks.check_run_config(config, "all")
