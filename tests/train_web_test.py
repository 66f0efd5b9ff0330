"""Training against a web search API (config.tools.backend='web'), then the
same run replayed from the web cache with the service gone: identical
metrics. The service is a fake on 127.0.0.1 (tests/web_test_utils.py)."""

import json
import pathlib

from trainer_test_utils import by_step, tiny_config
from web_test_utils import kelto_web, search_kelto

from mgrpo_jax.runtime.metrics import MetricsWriter
from mgrpo_jax.train import trainer

# What only the network path changes: the cache answers instead of HTTP.
NETWORK = ("tools/cache_hits", "tools/http_tries")


def _questions(path: pathlib.Path, n: int) -> str:
  path.write_text("".join(json.dumps({
      "id": f"q{i}", "question": f"Which river flows through Kelto {i}?",
      "answer": "Sorn"}) + "\n" for i in range(n)))
  return str(path)


def test_a_run_against_the_web_replays_offline_exactly(tmp_path,
                                                       monkeypatch):
  monkeypatch.setenv("MGRPO_JAX_CACHE", str(tmp_path / "cache"))
  monkeypatch.setenv("MGRPO_SEARCH_API_KEY", "sk-test")
  web = kelto_web(monkeypatch)

  def config(name):
    c = tiny_config(tmp_path / name, steps=1)
    c.sft.steps = 0  # A random tiny team: the seeded first turns search.
    c.data.train = _questions(tmp_path / "train.jsonl", 4)
    c.data.validation = _questions(tmp_path / "validation.jsonl", 2)
    c.data.test = c.data.validation
    search_kelto(c, web)
    return c

  live = config("live")
  trainer.run(live, log=lambda m: None)
  web.close()
  assert web.hits("/search") >= 1
  live_steps = by_step(MetricsWriter.read(pathlib.Path(live.run_dir) / "all"))
  assert live_steps[1]["tools/searches"] >= 1
  assert live_steps[1]["tools/http_tries"] >= 1
  monkeypatch.delenv("MGRPO_SEARCH_API_KEY")  # Replay needs no key.
  replay = config("replay")
  replay.tools.web.replay = True
  trainer.run(replay, log=lambda m: None)
  replay_steps = by_step(MetricsWriter.read(pathlib.Path(replay.run_dir)
                                            / "all"))
  assert replay_steps[1]["tools/http_tries"] == 0
  assert replay_steps[1]["tools/errors/cache_miss"] == 0
  assert live_steps[1]["tools/errors/no_key"] == 0
  for step, metrics in live_steps.items():
    same = {k: v for k, v in metrics.items() if k not in NETWORK}
    assert same == {k: v for k, v in replay_steps[step].items()
                    if k not in NETWORK}, step
