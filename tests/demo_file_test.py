"""agents/demo_file.py: demonstration conversations from a JSONL file,
rendered exactly as the rollout controller renders them."""

import json

import pytest

from trainer_test_utils import tiny_config
from mgrpo_jax.agents import demo_file, demonstrations
from mgrpo_jax.agents import tiny_team as tiny
from mgrpo_jax.agents.team import agents_config
from mgrpo_jax.data.records import DataError
from mgrpo_jax.data.world import WorldConfig, generate_world
from mgrpo_jax.models import tiny as tiny_model
from mgrpo_jax.train import data as train_data
from mgrpo_jax.train import team_build
from mgrpo_jax.train.warm_start import check_demonstrations, warm_start_key

WORLD = WorldConfig(num_entities=40, train_questions=6,
                    validation_questions=2, test_questions=2, max_hops=2)


@pytest.fixture(scope="module", name="world")
def _world():
  return generate_world(WORLD)


@pytest.fixture(scope="module", name="tok")
def _tok(world):
  return tiny_model.train_tokenizer(tiny.tokenizer_texts(world), 1024)


def _agents(layout="multi"):
  config = agents_config()
  config.prompt_style = "brief"
  config.layout = layout
  if layout == "single":
    config.main.max_turns = 5
  return config


@pytest.mark.parametrize("layout", ["multi", "single"])
def test_the_oracles_demonstrations_round_trip_through_a_file(
    tmp_path, world, tok, layout):
  taskset = world.task_set("train")
  agents = _agents(layout)
  rows = demonstrations.oracle_rollouts(taskset, tok, agents=agents,
                                        early_answer=0.5, seed=3)
  path = tmp_path / "demos.jsonl"
  written = demo_file.write_conversations([r for row in rows for r in row],
                                          path)
  expected = [t for row in rows for r in row for t in (r.main, *r.subs)]
  assert written == len(expected)
  got = demo_file.render(demo_file.read_conversations(path, agents), tok,
                         agents)
  for want, have in zip(expected, got, strict=True):
    assert have.agent == want.agent and have.instruction == want.instruction
    assert have.tokens.tolist() == want.tokens.tolist()
    assert have.loss_mask.tolist() == want.loss_mask.tolist()
    assert have.prompt_len == want.prompt_len and have.answer == want.answer


def test_a_hand_written_reply_is_wrapped_as_the_tool_would_be(tok):
  agents = _agents()
  conv = demo_file.Conversation("sub", "Who founded X?", (
      ('I search. <tool_call>{"name": "search", "arguments": {"query": "X"}}'
       "</tool_call> trailing words are cut", "search", "[w1] X: ..."),
      ("<answer>Ann</answer>", None, None)), "hand")
  [trajectory] = demo_file.render([conv], tok, agents)
  text = tok.decode(trajectory.tokens[~trajectory.loss_mask])
  assert '<tool_response name="search">\n[w1] X: ...\n</tool_response>' in text
  learned = tok.decode(trajectory.tokens[trajectory.loss_mask])
  assert "trailing" not in learned and learned.endswith("</answer>")
  assert trajectory.answer == "Ann"


BAD = [
    ({"agent": "boss", "user": "Q?", "turns": []},
     "line 1: field 'agent' is 'boss'; expected one of \\['main', 'sub'\\]"),
    ({"agent": "main", "user": "Q?", "turns": []},
     "field 'turns' is empty"),
    ({"agent": "main", "user": "Q?", "turns": [
        {"assistant": '<tool_call>{"name": "delegate", "arguments": '
                      '{"task": "A?"}', "reply": "B"},
        {"assistant": "<answer>B</answer>"}]},
     "field 'turns\\[0\\].assistant' does not parse under the protocol "
     "\\(.*\\); expected one well-formed tool call of \\['delegate'\\]"),
    ({"agent": "sub", "user": "Q?", "turns": [
        {"assistant": '<tool_call>{"name": "delegate", "arguments": '
                      '{"task": "A?"}}</tool_call>', "reply": "B"},
        {"assistant": "<answer>B</answer>"}]},
     "turns\\[0\\].assistant' does not parse .*delegate"),
    ({"agent": "main", "user": "Q?", "turns": [
        {"assistant": "<answer>B</answer>", "reply": "more"}]},
     "field 'turns\\[0\\].reply' is given after the answering turn"),
    ({"agent": "main", "user": "Q?", "turns": [
        {"assistant": "<answer>B</answer>"},
        {"assistant": "<answer>B</answer>"}]},
     "field 'turns\\[0\\].assistant' is a answer; expected one well-formed "
     "tool call"),
    ({"agent": "main", "user": "Q?", "turns": [
        {"assistant": '<tool_call>{"name": "delegate", "arguments": '
                      '{"task": "A?"}}</tool_call>'},
        {"assistant": "<answer>B</answer>"}]},
     "field 'turns\\[0\\].reply' is missing"),
]


@pytest.mark.parametrize("record,match", BAD)
def test_bad_conversations_name_the_line_and_the_field(tmp_path, record,
                                                       match):
  path = tmp_path / "demos.jsonl"
  path.write_text(json.dumps(record) + "\n")
  with pytest.raises(DataError, match=match):
    demo_file.read_conversations(path, _agents())


def test_too_many_turns_and_too_long_are_refused(tmp_path, tok):
  agents = _agents()
  agents.main.max_turns = 1
  call = {"assistant": '<tool_call>{"name": "delegate", "arguments": '
                       '{"task": "A?"}}</tool_call>', "reply": "B"}
  path = tmp_path / "demos.jsonl"
  path.write_text(json.dumps({"agent": "main", "user": "Q?", "turns": [
      call, {"assistant": "<answer>B</answer>"}]}) + "\n")
  with pytest.raises(DataError, match="has 2 turns; expected at most 1"):
    demo_file.read_conversations(path, agents)
  agents = _agents()
  agents.main.context_tokens = 40
  conversations = demo_file.read_conversations(path, agents)
  with pytest.raises(DataError, match="demos.jsonl, line 1: the "
                     "conversation is .* ids long; expected at most "
                     "agents.main.context_tokens=40"):
    demo_file.render(conversations, tok, agents)


def test_a_run_warm_starts_from_a_demonstration_file(tmp_path, monkeypatch,
                                                    world, tok):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  config = tiny_config(tmp_path)
  data = train_data.load_data(config)
  agents = team_build.agents_section(config)
  rows = demonstrations.oracle_rollouts(
      world.task_set("train"), tok, agents=agents)
  path = tmp_path / "demos.jsonl"
  demo_file.write_conversations([r for row in rows for r in row], path)
  oracle_key = warm_start_key(config)
  config.sft.demonstrations = str(path)
  check_demonstrations(config, data.train, data.documents)
  key = warm_start_key(config)
  assert key != oracle_key
  path.write_text(path.read_text().replace("I search", "I look"))
  assert warm_start_key(config) != key  # The file's contents are keyed.
  logs = []
  _, models, figures = team_build.build_models(
      config, {"main": None, "sub": None}, data, ["main"], log=logs.append)
  assert figures["sft/steps"] == config.sft.steps
  assert any("conversations of" in line for line in logs)
  path.write_text('{"agent": "main", "user": "Q?", "turns": '
                  '[{"assistant": "no action"}]}\n')
  with pytest.raises(DataError, match="config.sft.demonstrations=.*demos"
                     ".jsonl, line 1: field 'turns\\[0\\].assistant' does "
                     "not parse"):
    check_demonstrations(config, data.train, data.documents)
