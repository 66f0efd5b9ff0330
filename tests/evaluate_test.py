"""`python -m mgrpo_jax.evaluate`: end to end on a tiny model and SmolLM2."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from configs import evaluate as evaluate_config
from model_test_utils import tiny_config, tiny_tokenizer
from mgrpo_jax import evaluate
from mgrpo_jax.data.readers import DataError
from mgrpo_jax.models import build, save_hf_checkpoint
from mgrpo_jax.runtime.config_checks import ConfigError, load_config_file
from web_test_utils import kelto_web, search_kelto

HOTPOT = [
    {"_id": "h1", "question": "Which river flows through the city where "
     "Anna Vel was born?", "answer": "Sorn", "type": "bridge",
     "level": "medium",
     "supporting_facts": [["Anna Vel", 0], ["Kelto", 1]],
     "context": [["Anna Vel", ["Anna Vel is a painter.",
                               " She was born in Kelto."]],
                 ["Kelto", ["Kelto is a town.", " The Sorn flows through "
                            "Kelto."]]]},
    {"_id": "h2", "question": "Are Kelto and Brim both towns?",
     "answer": "yes", "type": "comparison", "level": "easy",
     "supporting_facts": [["Kelto", 0], ["Brim", 0]],
     "context": [["Kelto", ["Kelto is a town.", " The Sorn flows through "
                            "Kelto."]],
                 ["Brim", ["Brim is a town on the coast."]]]},
]


def tiny_run_config():
  config = evaluate_config.get_config()
  config.world.num_entities = 40
  config.world.train_questions = 4
  config.world.validation_questions = 4
  config.world.test_questions = 4
  for side in ("main", "sub"):
    config.agents[side].max_turns = 2
    config.agents[side].max_new_tokens = 24
    config.agents[side].context_tokens = 1024
    config.agents[side].rows = 4
  config.eval.limit = 2
  return config


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
  path = tmp_path_factory.mktemp("tiny_model")
  model = build.init_model(tiny_config(max_position_embeddings=1024), seed=0)
  save_hf_checkpoint(model, tiny_tokenizer(), path)
  return str(path)


@pytest.fixture
def hotpot_file(tmp_path):
  path = tmp_path / "hotpot_dev.json"
  path.write_text(json.dumps(HOTPOT))
  return str(path)


def read_lines(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def test_tiny_model_on_the_world_and_on_hotpotqa(tiny_checkpoint, hotpot_file,
                                                 tmp_path, monkeypatch):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  config = tiny_run_config()
  for data, name in (("synthetic", "world"), (hotpot_file, "hotpot")):
    out = tmp_path / name
    metrics = evaluate.evaluate(config, data=data, checkpoint=tiny_checkpoint,
                                output_dir=str(out), progress=False)
    lines = read_lines(out / "transcripts.jsonl")
    assert len(lines) == 2 * 2  # 2 questions x 2 rollouts.
    assert {l["rollout"] for l in lines} == {0, 1}
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["metrics"] == pytest.approx(metrics)
    for key in ("pass@1", "avg@2", "pass@2", "sub_calls_per_rollout",
                "sub_tokens_per_question", "format"):
      assert 0 <= metrics[key]
    # A random model writes noise after the seeded opening of a call; the
    # budgets end every rollout as a format failure.
    prefix = config.agents.main.first_turn_prefix
    for line in lines:
      transcript = line["transcript"]
      assert transcript["turns"][0]["text"].startswith(prefix)
      assert transcript["finish"] in ("turn_limit", "context_limit")
      assert not line["correct"] and not transcript["format_ok"]
    assert metrics["format"] == 0 and metrics["pass@1"] == 0
    assert metrics["main_tokens_per_question"] > 0
  assert "by_hops/2/pass@1" in metrics  # HotpotQA questions are 2-hop.
  assert "by_level/medium/pass@1" in metrics


def test_bad_inputs_are_named(tiny_checkpoint, hotpot_file, tmp_path):
  config = tiny_run_config()
  with pytest.raises(DataError, match="no such file"):
    evaluate.evaluate(config, data=str(tmp_path / "missing.jsonl"),
                      checkpoint=tiny_checkpoint, progress=False)
  gaia = tmp_path / "metadata.jsonl"
  gaia.write_text(json.dumps({"task_id": "g1", "Question": "q?", "Level": 1,
                              "Final answer": "a", "file_name": ""}) + "\n")
  with pytest.raises(ValueError, match="pass --corpus"):
    evaluate.evaluate(config, data=str(gaia), checkpoint=tiny_checkpoint,
                      progress=False)
  config.eval.rollouts = 0
  with pytest.raises(ValueError, match="config.eval.rollouts=0"):
    evaluate.evaluate(config, data=hotpot_file, progress=False)
  config.eval.rollouts = 1
  out = tmp_path / "done"
  out.mkdir()
  (out / "transcripts.jsonl").write_text("earlier run\n")
  with pytest.raises(ValueError, match="already holds transcripts"):
    evaluate.evaluate(config, data=hotpot_file, checkpoint=tiny_checkpoint,
                      output_dir=str(out), progress=False)
  assert (out / "transcripts.jsonl").read_text() == "earlier run\n"


def gaia_file(tmp_path):
  """GAIA metadata: questions with no documents (the web has the pages)."""
  path = tmp_path / "metadata.jsonl"
  path.write_text(json.dumps({
      "task_id": "g1", "Question": "Which river flows through Kelto?",
      "Level": 1, "Final answer": "Sorn", "file_name": ""}) + "\n")
  return str(path)


def test_the_web_backend_end_to_end_then_replayed(tiny_checkpoint, tmp_path,
                                                  monkeypatch):
  """GAIA on a fake web (127.0.0.1): the seeded first turns delegate and
  search whatever the random model writes after them; the tool result is
  the web's, the figures count it, and a replay from the cache with the
  web gone writes the same transcript."""
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  monkeypatch.setenv("MGRPO_SEARCH_API_KEY", "sk-secret")
  web = kelto_web(monkeypatch)
  config = tiny_run_config()
  config.eval.rollouts = 1
  config.agents.temperature = 0.0
  search_kelto(config, web)
  gaia = gaia_file(tmp_path)
  with pytest.raises(ValueError, match="the web backend searches the web, "
                     "not a corpus"):
    evaluate.evaluate(config, data=gaia, corpus=gaia, progress=False)
  metrics = evaluate.evaluate(config, data=gaia, checkpoint=tiny_checkpoint,
                              output_dir=str(tmp_path / "live"),
                              progress=False)
  web.close()
  assert web.hits("/search") == 1
  [line] = read_lines(tmp_path / "live" / "transcripts.jsonl")
  sub_first = line["transcript"]["turns"][0]["sub_agent"]["turns"][0]
  assert sub_first["arguments"] == {"query": "Kelto river"}
  assert f"[{web.url('/kelto')}] Kelto: The Sorn flows" in sub_first["result"]
  assert metrics["tools/searches"] == 1 and metrics["tools/http_tries"] >= 1
  assert metrics["tools/errors/no_key"] == 0
  saved = json.loads((tmp_path / "live" / "metrics.json").read_text())
  assert saved["metrics"]["tools/searches"] == 1
  config.tools.web.replay = True
  replayed = evaluate.evaluate(config, data=gaia, checkpoint=tiny_checkpoint,
                               output_dir=str(tmp_path / "replay"),
                               progress=False)
  assert read_lines(tmp_path / "replay" / "transcripts.jsonl") == [line]
  assert replayed["tools/cache_hits"] >= 1 and replayed["tools/http_tries"] == 0
  for name, value in metrics.items():  # The same calls, the same failures.
    if name.startswith(("tools/errors/", "tools/searches", "tools/visits")):
      assert replayed[name] == value, name


def test_bad_tools_config_stops_before_any_compute(tmp_path):
  config = tiny_run_config()
  config.tools.backend = "web"  # Without an endpoint.
  with pytest.raises(ConfigError, match="config.tools.web.endpoint=''"):
    evaluate.evaluate(config, data=str(tmp_path / "missing.jsonl"),
                      checkpoint=str(tmp_path / "no-model"),
                      output_dir=str(tmp_path / "out"), progress=False)
  assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,line", [
    (["--config.eval.limt=2"], "error: unknown config field "
     "config.eval.limt: did you mean config.eval.limit?"),
    (["--config.eval.rollouts=0"], "error: config.eval.rollouts=0: expected "
     "a positive integer"),
    (["--config.tools.backend=bing"], "error: config.tools.backend='bing': "
     "expected one of ['local', 'web']"),
])
def test_a_bad_command_line_is_one_line_and_exit_2(args, line, tmp_path):
  out = tmp_path / "out"
  done = subprocess.run(
      [sys.executable, "-m", "mgrpo_jax.evaluate", "--config",
       "configs/evaluate.py", f"--output_dir={out}", *args],
      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
      capture_output=True, text=True, timeout=300)
  assert done.returncode == 2, done.stderr[-2000:]
  assert line in done.stderr and "Traceback" not in done.stderr
  assert len(done.stderr.strip().splitlines()) <= 3, done.stderr
  assert not out.exists()


@pytest.mark.slow  # 22 s of SmolLM2 rollouts.
def test_smollm2_default_delegates_end_to_end(hotpot_file, tmp_path):
  """The command line, on the real default model: the untrained SmolLM2
  writes the delegated task itself, and its sub-agent searches BM25."""
  out = tmp_path / "smollm2"
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  cmd = [sys.executable, "-m", "mgrpo_jax.evaluate",
         "--config", os.path.join(repo, "configs", "evaluate.py"),
         "--data", hotpot_file, "--output_dir", str(out),
         "--config.eval.rollouts=1", "--config.eval.limit=1",
         "--config.agents.temperature=0",
         "--config.agents.main.max_turns=2",
         "--config.agents.sub.max_turns=2",
         "--config.agents.main.max_new_tokens=48",
         "--config.agents.sub.max_new_tokens=48"]
  done = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                        cwd=repo)
  assert done.returncode == 0, done.stderr[-3000:]
  [line] = read_lines(out / "transcripts.jsonl")
  first = line["transcript"]["turns"][0]
  assert first["tool"] == "delegate" and first["format_ok"]
  task = first["arguments"]["task"]
  assert task and first["sub_agent"]["instruction"] == task
  sub_first = first["sub_agent"]["turns"][0]
  assert sub_first["tool"] == "search" and sub_first["format_ok"]
  # Whatever the model's query, the BM25 tool answered it.
  assert sub_first["result"].startswith('<tool_response name="search">')
  assert sub_first["arguments"]["query"]
  assert "pass@1" in done.stdout


def test_a_run_on_files_is_evaluated_on_its_own_validation_file():
  """A training config whose splits are files: --data left at "synthetic"
  evaluates its validation file, with its format and corpus file; a named
  split or a file given is taken as given."""
  config = load_config_file(str(pathlib.Path(__file__).resolve().parents[1]
                                / "configs" / "default.py"))
  assert evaluate.run_data(config, "synthetic", None, None) == (
      "synthetic", None, None)
  config.data.validation = "dev.jsonl"
  config.data.format = "musique"
  config.data.corpus = "pages.jsonl"
  assert evaluate.run_data(config, "synthetic", None, None) == (
      "dev.jsonl", "musique", "pages.jsonl")
  assert evaluate.run_data(config, "synthetic", "qa", "mine.jsonl") == (
      "dev.jsonl", "qa", "mine.jsonl")
  for given in ("synthetic:validation", "other.jsonl"):
    assert evaluate.run_data(config, given, None, None) == (given, None, None)
  assert evaluate.run_data(tiny_run_config(), "synthetic", None, None) == (
      "synthetic", None, None)  # An evaluation config has no data section.
