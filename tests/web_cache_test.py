"""The web backend's response cache: keys, whole writes, unreadable entries."""

import json

import pytest

from mgrpo_jax.agents.web_cache import ResponseCache, request_key


def test_the_key_is_the_request_and_only_the_request():
  key = request_key("POST", "https://s.example/search", {"q": "x", "num": 5})
  assert len(key) == 64 and int(key, 16) >= 0
  assert key == request_key("post", "https://s.example/search",
                            {"num": 5, "q": "x"})  # Order, case of method.
  others = [request_key("GET", "https://s.example/search", {"q": "x",
                                                            "num": 5}),
            request_key("POST", "https://t.example/search", {"q": "x",
                                                             "num": 5}),
            request_key("POST", "https://s.example/search", {"q": "y",
                                                             "num": 5}),
            request_key("POST", "https://s.example/search", {"q": "x",
                                                             "num": 6})]
  assert len({key, *others}) == 5


def test_round_trip_and_overwrite(tmp_path):
  cache = ResponseCache(tmp_path)
  key = request_key("GET", "https://a.example/", {})
  assert cache.get(key) is None and len(cache) == 0
  cache.put(key, {"text": "é one"})
  assert cache.get(key) == {"text": "é one"}
  assert cache.path(key) == tmp_path / key[:2] / f"{key}.json"
  cache.put(key, {"text": "two"})
  assert cache.get(key) == {"text": "two"} and len(cache) == 1
  assert [p.name for p in cache.path(key).parent.iterdir()] == [
      f"{key}.json"]  # No temporary file left behind.


def test_a_failed_write_keeps_the_old_entry(tmp_path):
  cache = ResponseCache(tmp_path)
  key = request_key("GET", "https://a.example/", {})
  cache.put(key, {"text": "kept"})
  with pytest.raises(TypeError):
    cache.put(key, {"text": object()})  # Not JSON: fails mid-write.
  assert cache.get(key) == {"text": "kept"}
  assert len(list(cache.path(key).parent.iterdir())) == 1


def test_unreadable_entries_read_as_none(tmp_path):
  cache = ResponseCache(tmp_path)
  key = request_key("GET", "https://a.example/", {})
  cache.path(key).parent.mkdir(parents=True)
  cache.path(key).write_text("{half an entr")
  assert cache.get(key) is None
  cache.path(key).write_text(json.dumps([1, 2]))
  assert cache.get(key) is None
  cache.put(key, {"text": "fixed"})
  assert cache.get(key) == {"text": "fixed"}
