"""The live web backend against a fake web on 127.0.0.1: search and visit
through the agent's tools, the cache and replay, every failure as a tool
result and a count, and the config checks."""

import dataclasses
import json

import pytest

from configs import evaluate as evaluate_config
from mgrpo_jax.agents.tools import ToolRegistry, search_and_visit
from mgrpo_jax.agents.web import (ERROR_KINDS, WebBackend, WebConfig,
                                  check_tools_config)
from mgrpo_jax.agents.web_http import HttpClient
from mgrpo_jax.runtime.config_checks import ConfigError
from web_test_utils import FakeWeb, Reply, html_page, json_reply

KEY = "sk-test-0123456789-secret"


@pytest.fixture(autouse=True)
def environment(monkeypatch):
  for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
               "all_proxy", "ALL_PROXY"):
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setenv("MGRPO_SEARCH_API_KEY", KEY)


def search_route(web):
  """Serper's format: POST {"q", "num"} -> {"organic": [...]}; the Kelto
  page first, then the Sorn page and a page of bytes."""
  def reply(request):
    q = request.json()["q"]
    results = [{"link": web.url("/kelto"), "title": "Kelto",
                "snippet": f"Kelto is a town ({q})."},
               {"link": web.url("/sorn"), "title": "Sorn",
                "snippet": "The Sorn is a river."},
               {"title": "no link: skipped"},
               {"link": web.url("/pdf"), "title": "PDF", "snippet": ""}]
    return json_reply({"organic": results[:request.json()["num"]],
                       "searchParameters": {"q": q}})
  return reply


@pytest.fixture
def web():
  with FakeWeb() as server:
    server.routes.update({
        "/search": search_route(server),
        "/kelto": html_page("Kelto", "Kelto is a town.",
                            "The Sorn flows through Kelto."),
        "/sorn": html_page("Sorn", "The Sorn is a river in the north."),
        "/pdf": Reply(body=b"%PDF-1.7\x00\x01\x02",
                      content_type="application/pdf"),
        "/huge": html_page("Huge", *["The Sorn is long. " * 50] * 400),
        "/plain": Reply(body=b"Plain text about the Sorn.",
                        content_type="text/plain"),
    })
    yield server


def web_config(**overrides) -> WebConfig:
  """configs/evaluate.py's tools.web with small waits and `overrides`."""
  fields = evaluate_config.get_config().tools.web.to_dict()
  fields.update(timeout_s=2.0, retries=2, backoff_s=0.01, max_backoff_s=0.05,
                min_interval_s=0.0)
  return WebConfig(**{**fields, **overrides})


def backend(web, tmp_path, **overrides) -> WebBackend:
  config = web_config(endpoint=web.url("/search"),
                      cache_dir=str(tmp_path / "web"), **overrides)
  return WebBackend(config)


def tools(b: WebBackend) -> ToolRegistry:
  return ToolRegistry(search_and_visit(b, default_k=3,
                                       visit_budget_chars=400))


def test_search_and_visit_through_the_tools(web, tmp_path):
  b = backend(web, tmp_path)
  out = tools(b).run("search", {"query": "river town"}).splitlines()
  assert out == [f"[{web.url('/kelto')}] Kelto: Kelto is a town (river "
                 "town).", f"[{web.url('/sorn')}] Sorn: The Sorn is a river."]
  [request] = web.requests
  assert request.method == "POST" and request.json() == {
      "q": "river town", "num": 3}
  assert request.headers["X-API-KEY"] == KEY
  assert request.headers["Content-Type"] == "application/json"
  hits = b.search("river town", 3)
  assert [h.score for h in hits] == [1.0, 0.5]
  page = tools(b).run("visit", {"page": web.url("/kelto"),
                                "goal": "which river"})
  # trafilatura keeps the article and drops the navigation and footer.
  assert page.startswith("# Kelto\n") and "The Sorn flows through Kelto." in (
      page)
  assert "Copyright" not in page and "<p>" not in page
  assert b.fetch(web.url("/plain")).text == "Plain text about the Sorn."
  assert b.errors == {} and b.counts["searches"] == 2


def test_get_requests_and_other_field_paths(web, tmp_path):
  web.routes["/brave"] = json_reply({"web": {"results": [
      {"url": web.url("/sorn"), "title": "Sorn",
       "description": "The Sorn is a river."}]}})
  b = backend(web, tmp_path, method="GET", key_header="Authorization",
              key_prefix="Bearer ", count_field="count",
              results_path="web.results", url_field="url",
              snippet_field="description")
  b = WebBackend(dataclasses.replace(b.config, endpoint=web.url("/brave")))
  [hit] = b.search("a river", 5)
  assert (hit.doc_id, hit.title, hit.snippet) == (
      web.url("/sorn"), "Sorn", "The Sorn is a river.")
  [request] = web.requests
  assert request.method == "GET" and request.body == b""
  assert request.path == "/brave?q=a+river&count=5"
  assert request.headers["Authorization"] == f"Bearer {KEY}"


def test_the_cache_answers_the_same_request_and_replays_offline(web,
                                                                tmp_path):
  b = backend(web, tmp_path)
  registry = tools(b)
  first = registry.run("search", {"query": "kelto"})
  page = registry.run("visit", {"page": web.url("/kelto"), "goal": "town"})
  assert registry.run("search", {"query": "kelto"}) == first
  assert registry.run("visit", {"page": web.url("/kelto"),
                                "goal": "town"}) == page
  assert web.hits("/search") == 1 and web.hits("/kelto") == 1
  assert b.counts["cache_hits"] == 2 and b.client.tries == 2
  registry.run("search", {"query": "kelto", "k": 2})  # Another request.
  assert web.hits("/search") == 2
  web.close()  # The web is gone: replay serves the cache.
  replay = backend(web, tmp_path, replay=True)
  registry = tools(replay)
  assert registry.run("search", {"query": "kelto"}) == first
  assert registry.run("visit", {"page": web.url("/kelto"),
                                "goal": "town"}) == page
  missed = registry.run("search", {"query": "sorn"})
  assert missed == ("Error: this search is not in the replay cache (replay "
                    "never goes online); try again or answer with what you "
                    "have.")
  assert "not in the replay cache" in registry.run(
      "visit", {"page": web.url("/sorn"), "goal": "x"})
  assert replay.errors == {"cache_miss": 2} and replay.client.tries == 0


def test_the_key_is_never_written(web, tmp_path):
  b = backend(web, tmp_path)
  b.search("kelto", 3)
  b.fetch(web.url("/kelto"))
  files = list((tmp_path / "web").rglob("*"))
  assert sum(f.is_file() for f in files) == 2
  for f in files:
    if f.is_file():
      text = f.read_text()
      assert KEY not in text and "X-API-KEY" not in text
      assert json.loads(text)["request"]["endpoint"].startswith("http://")
  # Pages never get the key either.
  assert "X-API-KEY" not in web.requests[1].headers


def test_a_missing_key_is_a_tool_result(web, tmp_path, monkeypatch):
  monkeypatch.delenv("MGRPO_SEARCH_API_KEY")
  b = backend(web, tmp_path)
  out = tools(b).run("search", {"query": "kelto"})
  assert out == ("Error: web search is unavailable (no API key is set); "
                 "answer with what you have.")
  assert b.errors == {"no_key": 1} and web.requests == []
  # Pages need no key; a key set later is used (the miss was not cached).
  assert b.fetch(web.url("/kelto")).title == "Kelto"
  monkeypatch.setenv("MGRPO_SEARCH_API_KEY", KEY)
  assert len(b.search("kelto", 3)) == 2


def test_a_service_that_times_out(web, tmp_path):
  web.queue("/search", *[Reply(delay_s=0.5)] * 2)
  b = backend(web, tmp_path, timeout_s=0.1, retries=1)
  out = tools(b).run("search", {"query": "kelto"})
  assert out == ("Error: the search service timed out (0.1 s a try) after 2 "
                 "tries; try again or answer with what you have.")
  assert b.errors == {"timeout": 1}
  # Replay gives the same answer; a live run asks again (and succeeds).
  replay = backend(web, tmp_path, replay=True)
  assert tools(replay).run("search", {"query": "kelto"}) == out
  assert replay.errors == {"timeout": 1}
  assert tools(b).run("search", {"query": "kelto"}).startswith("[http://")
  assert web.hits("/search") == 3


def test_429_then_success_and_429_always(web, tmp_path):
  web.queue("/search", Reply(429, headers={"Retry-After": "0"}))
  b = backend(web, tmp_path)
  assert tools(b).run("search", {"query": "kelto"}).startswith("[http://")
  assert b.errors == {} and b.client.tries == 2
  web.queue("/search", *[Reply(429)] * 3)
  out = tools(b).run("search", {"query": "sorn"})
  assert out == ("Error: the search service was rate limited (HTTP 429) "
                 "after 3 tries; try again or answer with what you have.")
  assert b.errors == {"rate_limited": 1}


@pytest.mark.parametrize("reply,message", [
    (Reply(body=b'{"organic": [', content_type="application/json"),
     "was not JSON with a list at 'organic'"),
    (json_reply({"results": []}), "was not JSON with a list at 'organic'"),
    (json_reply({"organic": [{"url": "http://x.example/"}]}),
     "results have no 'link' field"),
])
def test_malformed_answers_are_bad_json(web, tmp_path, reply, message):
  web.routes["/search"] = reply
  b = backend(web, tmp_path)
  out = tools(b).run("search", {"query": "kelto"})
  assert out.startswith("Error: the search service's ") and message in out
  assert b.errors == {"bad_json": 1}


def test_empty_results_and_empty_queries(web, tmp_path):
  web.routes["/search"] = json_reply({"organic": []})
  b = backend(web, tmp_path)
  assert tools(b).run("search", {"query": "zebra"}).startswith("No results")
  assert b.search("   ", 3) == [] and web.hits("/search") == 1


def test_bad_pages_are_tool_results(web, tmp_path):
  b = backend(web, tmp_path, max_bytes=20_000)
  registry = tools(b)

  def visit(page):
    return registry.run("visit", {"page": page, "goal": "river"})

  assert visit(web.url("/pdf")) == (
      f"Error: the page {web.url('/pdf')} is not text (application/pdf); "
      "try another result or answer with what you have.")
  assert visit(web.url("/gone")) == (
      f"Error: the page {web.url('/gone')} answered HTTP 404; try another "
      "result or answer with what you have.")
  for page in ("file:///etc/passwd", "Kelto", "ftp://x.example/a"):
    assert visit(page) == (
        f"Error: {page!r} is not a web page address; visit takes a URL "
        "(http:// or https://) from a search result.")
  huge = visit(web.url("/huge"))  # Read up to max_bytes, and counted.
  assert huge.startswith("# Huge (first 20000 bytes of a larger page)\n")
  assert "The Sorn is long." in huge
  assert b.errors == {"binary_page": 1, "http_error": 1, "bad_url": 3,
                      "too_large": 1}
  assert web.hits("/huge") == 1 and len(web.requests) == 3
  web.routes["/search"] = json_reply({"organic": [{"link": "x"}] * 10000})
  assert "larger than 20000 bytes" in registry.run("search", {"query": "a"})
  assert b.errors["too_large"] == 2


def test_figures_name_every_kind(web, tmp_path, monkeypatch):
  monkeypatch.delenv("MGRPO_SEARCH_API_KEY")
  b = backend(web, tmp_path)
  tools(b).run("search", {"query": "kelto"})
  tools(b).run("visit", {"page": web.url("/kelto"), "goal": "x"})
  tools(b).run("visit", {"page": web.url("/kelto"), "goal": "x"})
  figures = b.figures()
  assert set(figures) == {f"tools/errors/{k}" for k in ERROR_KINDS} | {
      "tools/searches", "tools/visits", "tools/cache_hits", "tools/http_tries"}
  assert figures["tools/errors/no_key"] == 1.0
  assert sum(v for k, v in figures.items() if "/errors/" in k) == 1.0
  assert (figures["tools/searches"], figures["tools/visits"],
          figures["tools/cache_hits"], figures["tools/http_tries"]) == (
              1.0, 2.0, 1.0, 1.0)


def test_an_injected_client_is_used(web, tmp_path):
  waits = []
  b = WebBackend(web_config(endpoint=web.url("/search"),
                            cache_dir=str(tmp_path)),
                 client=HttpClient(retries=1, backoff_s=7.0,
                                   sleep=waits.append))
  web.queue("/search", Reply(503))
  assert len(b.search("kelto", 3)) == 2 and waits == [7.0]


# ------------------------------------------------------------ config checks


def eval_config(**web_fields):
  config = evaluate_config.get_config()
  config.tools.backend = "web"
  config.tools.web.endpoint = "https://search.example/api"
  config.tools.web.update(web_fields)
  return config


def test_the_default_configs_pass():
  assert check_tools_config(evaluate_config.get_config()) == "local"
  assert check_tools_config(eval_config()) == "web"
  config = evaluate_config.get_config()
  del config.tools
  assert check_tools_config(config) == "local"  # No section: local.


@pytest.mark.parametrize("change,message", [
    (dict(backend="bing"), "config.tools.backend='bing': expected one of "
     "['local', 'web']"),
    (dict(endpoint=""), "config.tools.web.endpoint='': expected the search "
     "API's http(s) URL when config.tools.backend='web'"),
    (dict(endpoint="search.example/api"), "config.tools.web.endpoint="),
    (dict(timeout_s=-1.0), "config.tools.web.timeout_s=-1.0: expected a "
     "number in (0.0, inf)"),
    (dict(retries=-1), "config.tools.web.retries=-1: expected an integer "
     ">= 0"),
    (dict(min_interval_s=-0.5), "config.tools.web.min_interval_s=-0.5"),
    (dict(max_bytes=0), "config.tools.web.max_bytes=0: expected an integer "
     ">= 1"),
    (dict(method="PUT"), "config.tools.web.method='PUT': expected one of "
     "['GET', 'POST']"),
    (dict(key_env=""), "config.tools.web.key_env='': expected a non-empty "
     "string"),
    (dict(replay="yes"), "config.tools.web.replay='yes': expected True or "
     "False"),
])
def test_bad_values_are_named(change, message):
  config = eval_config()
  backend_name = change.pop("backend", None)
  if backend_name:
    config.tools.backend = backend_name
  with config.tools.web.ignore_type():
    config.tools.web.update(change)
  with pytest.raises(ConfigError) as e:
    check_tools_config(config)
  assert message in str(e.value)


def test_unknown_web_fields_are_refused():
  config = eval_config()
  config.tools.web.endpont = "https://x.example"
  with pytest.raises(ConfigError, match="config.tools.web: .*'endpont'"):
    check_tools_config(config)


def test_page_encodings_empty_pages_and_a_failing_extractor(web, tmp_path,
                                                            monkeypatch):
  web.routes["/latin1"] = Reply(
      body=("<html><head><meta charset='iso-8859-1'><title>Caf\u00e9"
            "</title></head><body><p>Le caf\u00e9 est sur la Sorn, pr\u00e8s "
            "du pont.</p></body></html>").encode("latin-1"),
      content_type="text/html")  # No charset in the header.
  web.routes["/empty"] = Reply(body=b"<html><body> </body></html>")
  b = backend(web, tmp_path)
  doc = b.fetch(web.url("/latin1"))
  assert doc.title == "Caf\u00e9" and "Le caf\u00e9 est sur la Sorn" in doc.text
  assert tools(b).run("visit", {"page": web.url("/empty"), "goal": "x"}) == (
      f"Error: the page {web.url('/empty')} has no readable text; try "
      "another result or answer with what you have.")
  assert b.errors == {"empty_page": 1}
  import trafilatura  # pylint: disable=g-import-not-at-top

  def broken(*args, **kwargs):
    raise RecursionError("a page too deep")

  monkeypatch.setattr(trafilatura, "extract", broken)
  doc = b.fetch(web.url("/sorn"))  # trafilatura fails: tags stripped.
  assert doc.title == web.url("/sorn") and "The Sorn is a river" in doc.text
  assert "<p>" not in doc.text
