"""build_team: the configured team, and config values it refuses."""

import pytest

from model_test_utils import tiny_config, tiny_tokenizer
from mgrpo_jax.agents.team import agents_config, build_team
from mgrpo_jax.data.corpus import Document, LocalCorpus
from mgrpo_jax.models import build


@pytest.fixture(scope="module")
def parts():
  model = build.init_model(tiny_config(), seed=0)
  corpus = LocalCorpus([Document("d", "D", "some text")])
  return model, tiny_tokenizer(), corpus


def small(**changes):
  config = agents_config()
  for side in ("main", "sub"):
    config[side].context_tokens = 1024
    config[side].rows = 2
  for key, value in changes.items():
    section, _, field = key.rpartition(".")
    (config[section] if section else config)[field] = value
  return config


def test_branches_reach_the_controller(parts):
  model, tok, corpus = parts
  assert build_team(small(), corpus, main_model=model,
                    main_tokenizer=tok).branches == 1
  assert build_team(small(sub_branches=3), corpus, main_model=model,
                    main_tokenizer=tok).branches == 3


def test_multi_single_and_reasoner_teams(parts):
  model, tok, corpus = parts
  multi = build_team(small(), corpus, main_model=model, main_tokenizer=tok)
  assert sorted(multi.agents) == ["main", "sub"]
  assert sorted(multi.main.specs()) == ["delegate"]
  assert sorted(multi.agents["sub"].specs()) == ["search", "visit"]
  assert multi.agents["main"].policy is not multi.agents["sub"].policy
  reason = build_team(small(reason_tool=True), corpus, main_model=model,
                      main_tokenizer=tok)
  assert sorted(reason.main.specs()) == ["delegate", "reason"]
  assert reason.agents["reasoner"].free_text
  assert reason.quota == {"main": 2, "sub": 1, "reasoner": 1}
  single = build_team(small(layout="single"), corpus, main_model=model,
                      main_tokenizer=tok)
  assert list(single.agents) == ["single"]
  assert sorted(single.main.specs()) == ["search", "visit"]


def test_brief_prompts_keep_role_and_tools(parts):
  model, tok, corpus = parts
  full = build_team(small(), corpus, main_model=model, main_tokenizer=tok)
  brief = build_team(small(prompt_style="brief"), corpus, main_model=model,
                     main_tokenizer=tok)
  for name in ("main", "sub"):
    long_text = full.agents[name].system_prompt()
    short_text = brief.agents[name].system_prompt()
    assert len(short_text) < len(long_text) / 3, name
    # The role's first sentence tells the shared warm start which agent it is.
    assert short_text.split("\n")[0] == long_text.split(". ")[0] + ".", name
  assert "Tools: delegate(task)." in brief.main.system_prompt()
  assert "Tools: search(query), visit(page, goal)." in (
      brief.agents["sub"].system_prompt())
  assert "<answer>" in brief.main.system_prompt()


def test_every_sampler_holds_the_configured_weights_dtype(parts):
  model, tok, corpus = parts
  for dtype in ("float32", "bfloat16"):
    team = build_team(small(sampler_dtype=dtype), corpus, main_model=model,
                      main_tokenizer=tok)
    assert {a.policy.weights_dtype for a in team.agents.values()} == {dtype}


@pytest.mark.parametrize("change, message", [
    ({"layout": "solo"}, r"config.agents.layout='solo': expected one of"),
    ({"main.max_turns": 0}, r"config.agents.main.max_turns=0"),
    ({"sub.rows": -1}, r"config.agents.sub.rows=-1"),
    ({"sub.context_tokens": 200}, r"config.agents.sub.context_tokens=200"),
    ({"search_k": 0}, r"config.agents.search_k=0"),
    ({"temperature": -1.0}, r"config.agents.temperature=-1.0"),
    ({"prompt_style": "short"}, r"config.agents.prompt_style='short': "
     r"expected one of \['full', 'brief'\]"),
    ({"sampler_dtype": "float16"}, r"config.agents.sampler_dtype='float16': "
     r"expected one of \['float32', 'bfloat16'\]"),
    ({"sub_branches": 0}, r"config.agents.sub_branches=0: expected a "
     r"positive integer"),
])
def test_bad_config_values_are_named(parts, change, message):
  model, tok, corpus = parts
  with pytest.raises(ValueError, match=message):
    build_team(small(**change), corpus, main_model=model, main_tokenizer=tok)
