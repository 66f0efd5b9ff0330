"""Every config file loads, and its values pass the checks of its job."""

import importlib.util
import pathlib

import pytest

from mgrpo_jax.agents.team import check_agents_config
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax import toy
from mgrpo_jax.train import team_build
from mgrpo_jax.train import trainer

ROOT = pathlib.Path(__file__).resolve().parents[1]
TRAINING = ("default", "frozen_sub", "single_agent", "smollm2", "verifier")


def module_of(name):
  spec = importlib.util.spec_from_file_location(name,
                                                ROOT / "configs" / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load(name):
  return module_of(name).get_config()


def check_run_config(config):
  """The trainer's and the team's checks; the world's validation split
  holds the questions evaluated. Returns the world."""
  trainer.check_config(config, "all")
  check_agents_config(team_build.agents_section(config))
  world = generate_world(WorldConfig(**config.world.to_dict()))
  assert len(world.splits["validation"]) >= config.train.eval_questions
  return world


def test_every_config_file_is_covered():
  names = {p.stem for p in (ROOT / "configs").glob("*.py")}
  assert names == {*TRAINING, "toy", "evaluate", "reproduce", "tools",
                   "reading", "controls"}


@pytest.mark.parametrize("arg", ["sub", "main", "sub:quick", "main:quick"])
def test_the_positive_controls_pass_the_trainer_checks(arg):
  module = module_of("controls")
  config = module.get_config(arg)
  check_run_config(config)
  # One learner over a scripted partner, never the run's world in the warm
  # start, never the test split.
  assert (config.mode, config.train.scripted) == {
      "sub": ("frozen_main", "main"), "main": ("frozen_sub", "sub")}[
          arg.split(":")[0]]
  assert config.sft.worlds >= 2 and config.train.test_questions == 0
  if arg.startswith("sub"):  # A direct reward on the report alone.
    assert (config.reward.v_fmt, config.reward.v_main,
            config.reward.v_exp) == (0.0, 0.0, 1.0)
    assert config.advantage.sub_group_by == "subtask"
  assert (config.model.name == "tiny") == arg.endswith("quick")
  for bad in ("both", "sub:big"):
    with pytest.raises(ValueError, match=f"configs/controls.py:{bad}"):
      module.get_config(bad)


@pytest.mark.parametrize("arg", ["full", "quick"])
def test_the_reading_testbed_passes_the_trainer_checks(arg):
  module = module_of("reading")
  config = module.get_config(arg)
  check_run_config(config)
  # No injected weakness; the warm start never sees the run's world.
  assert config.sft.early_answer == config.sft.lazy_report == 0.0
  assert config.sft.worlds >= 2
  with pytest.raises(ValueError, match="configs/reading.py:big"):
    module.get_config("big")


@pytest.mark.parametrize("name", TRAINING)
def test_training_configs_pass_the_trainer_checks(name):
  config = load(name)
  assert config.task == "agents"
  trainer.check_config(config, "all")
  check_agents_config(team_build.agents_section(config))
  assert config.run_dir == f"runs/{name}"  # Runs never share a directory.
  world = generate_world(WorldConfig(**config.world.to_dict()))
  assert len(world.splits["validation"]) >= config.train.eval_questions


@pytest.mark.parametrize("arg", ["full", "pilot", "quick", "full:clean",
                                 "quick:clean"])
def test_reproduce_configs_pass_the_trainer_checks(arg):
  module = module_of("reproduce")
  config = module.get_config(arg)
  world = check_run_config(config)
  assert len(world.splits["test"]) >= config.train.test_questions
  assert (config.sft.lazy_report == 0.0) == arg.endswith("clean")
  with pytest.raises(ValueError, match="expected one of full, pilot, quick"):
    module.get_config("large")
  if arg == "pilot":  # The pilot never looks at the test split.
    assert config.train.test_questions == 0
    assert config.train.eval_questions == 128


def test_reproduce_task_needs_the_visit_for_most_hops():
  """configs/reproduce.py's design (README "Reproducing the paper's
  comparison"): the 60-character snippet states the answer of fewer than
  half of the hops, so a sub-agent that reports from snippets is mostly
  wrong; the test split has 200 questions, half of them one-hop."""
  config = module_of("reproduce").get_config("full")
  world = generate_world(WorldConfig(**config.world.to_dict()))
  pages = {d.doc_id: d.text for d in world.documents}
  test = world.splits["test"]
  assert len(test) == 200 and sum(t.hops == 1 for t in test) == 100
  for split in ("train", "test"):
    hops = [(sub.answer, pages[task.metadata["doc_ids"][i]])
            for task in world.splits[split]
            for i, sub in enumerate(task.sub_questions)]
    in_snippet = sum(answer in page[:config.agents.snippet_chars]
                     for answer, page in hops)
    assert 0.25 < in_snippet / len(hops) < 0.45, (split, in_snippet)
    # Every answer is on the page the visit reads.
    assert all(answer in page for answer, page in hops)


def test_baselines_differ_from_default_only_where_they_say():
  default = load("default").to_dict()
  frozen = load("frozen_sub").to_dict()
  assert frozen.pop("mode") == "frozen_sub" and default.pop("mode") == "mgrpo"
  frozen.pop("run_dir"), default.pop("run_dir")
  assert frozen == default
  verifier = load("verifier").to_dict()
  assert verifier["agents"].pop("sub_kinds") == ("sub", "verifier")
  assert default["agents"].pop("sub_kinds") == ("sub",)
  verifier.pop("mode"), verifier.pop("run_dir")
  assert verifier == default
  single = load("single_agent")
  assert single.mode == "single"
  # Search and visit per hop, then the answer.
  assert single.agents.main.max_turns >= 2 * single.world.max_hops + 1


def test_toy_and_evaluate_configs():
  toy.validate(load("toy"))
  check_agents_config(load("evaluate").agents)


def test_training_and_evaluation_share_one_tools_section():
  """configs/tools.py is the one default of the tools' backend: training
  and evaluation read the same section (a run replayed by evaluate uses
  the settings it trained with)."""
  tools = load("tools").to_dict()
  assert tools["backend"] == "local"
  assert load("evaluate").tools.to_dict() == tools
  for name in TRAINING:
    assert load(name).tools.to_dict() == tools
