"""The live web backend of the `search` / `visit` tools (a SearchBackend).

`WebBackend.search(query, k)` asks a web-search JSON API; `fetch(url)` reads
a page and turns its HTML into text with trafilatura. The default request
and answer format is the one Serper (google.serper.dev/search) speaks:

  POST <endpoint>
  X-API-KEY: $MGRPO_SEARCH_API_KEY          (header `key_header`, value
  Content-Type: application/json             `key_prefix` + the key)
  {"q": QUERY, "num": K}                     (`query_field`, `count_field`)
  -> {"organic": [{"link": URL, "title": TITLE, "snippet": SNIPPET}, ...]}
     (`results_path`, a dotted path, "" for a top-level list; `url_field`,
      `title_field`, `snippet_field`; extra fields are ignored)

`method="GET"` sends the query and count as URL parameters instead (Brave:
q, count, results "web.results", url "url", snippet "description", key
header "X-Subscription-Token"). A hit's doc_id is its URL; its score is
1 / rank (services give no score). The key is read from the environment
variable `key_env`, sent only to the search endpoint, and never written;
`key_prefix` serves APIs such as `Authorization: Bearer <key>`
(`key_header="Authorization"`, `key_prefix="Bearer "`). An API that wants
its key as a URL parameter is not supported (the key would land in the
cache key and the files).

Every answer (and every failure) is cached on disk (agents/web_cache.py,
keyed by method, endpoint and parameters; default folder
`$MGRPO_JAX_CACHE/web`); `replay=True` serves the cache only and never
touches the network, so an evaluation replays offline exactly (failures
included); a request the cache lacks becomes the tool result `Error: this
search is not in the replay cache ...` (counted as `cache_miss`), and the
endpoint must be the one the cache was made with. A live run asks again
where the cache holds a transient failure (a timeout, 429, 5xx).

Nothing the service or a page does crashes the agent: each failure raises
`ToolError` (tools.py), whose sentence is the tool result, and is counted
in `errors` by kind (ERROR_KINDS); `figures()` gives the counts as
`tools/...` figures for metrics.json. The kinds, when each happens, and
what the agent reads:

  no_key        the key's variable is unset (a warning is logged at start):
                "Error: web search is unavailable (no API key is set);
                answer with what you have."
  timeout       every try timed out: "Error: the search service timed out
                (20 s a try) after 3 tries; try again or answer with what
                you have."
  rate_limited  HTTP 429 on every try: "Error: the search service was rate
                limited (HTTP 429) after 3 tries; ..."
  http_error    5xx on every try, or another status (404) at once: "Error:
                the page https://... answered HTTP 404; try another result
                or answer with what you have."
  unreachable   connection refused or reset, unknown host, every try:
                "Error: the page https://... could not be reached (...)
                after 3 tries; ..."
  bad_url       `visit` of something that is not an http(s) URL: "Error:
                'file:///etc/passwd' is not a web page address; visit takes
                a URL (http:// or https://) from a search result."
  bad_json      the answer is not JSON, has no list at `results_path`, or
                no `url_field`: "Error: the search service's answer was not
                JSON with a list at 'organic'; ..."
  binary_page   a page that is not text (PDF, image, ...): "Error: the page
                https://... is not text (application/pdf); ..."
  too_large     over `max_bytes`: a page is read cut (its title says so:
                "# Title (first 2000000 bytes of a larger page)"), a search
                answer is refused
  empty_page    a page with no readable text: "Error: the page https://...
                has no readable text; ..."
  cache_miss    replay, and the cache lacks the request: "Error: this
                search is not in the replay cache (replay never goes
                online); ..."
`tools/searches` and `tools/visits` count tool calls, `tools/cache_hits`
answers from the cache, `tools/http_tries` network tries (retries
included).

`--corpus` is refused with the web backend. Every field of
`config.tools.web` is commented in configs/tools.py;
`check_tools_config` stops a run with a bad value (an unknown backend, a
negative timeout, the web backend without an endpoint) before any model is
loaded, naming the field, the value and what was expected.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
from typing import Any, Mapping
import urllib.parse

from absl import logging
import ml_collections

from mgrpo_jax.agents.tools import ToolError
from mgrpo_jax.agents.web_cache import ResponseCache, request_key
from mgrpo_jax.agents.web_http import HttpClient, WebFailure, is_web_url
from mgrpo_jax.data.corpus import Document, SearchHit
from mgrpo_jax.runtime import cache as disk_cache
from mgrpo_jax.runtime.config_checks import (ConfigError, boolean, choice,
                                             fail, get, integer, number,
                                             string)

BACKENDS = ("local", "web")  # config.tools.backend.
METHODS = ("GET", "POST")
MAX_K = 20  # Most hits one search asks for.
# Failures counted in WebBackend.errors (README "Live web tools").
ERROR_KINDS = ("no_key", "timeout", "rate_limited", "http_error",
               "unreachable", "bad_url", "bad_json", "binary_page",
               "too_large", "empty_page", "cache_miss")
_HTML = (None, "text/html", "application/xhtml+xml")  # Read as HTML.
_ADVICE = {"search": "try again or answer with what you have.",
           "page": "try another result or answer with what you have."}


@dataclasses.dataclass(frozen=True)
class WebConfig:
  """The web backend's settings: `config.tools.web` (configs/tools.py
  holds the one default of each and comments every field)."""
  endpoint: str  # The search API's URL.
  method: str  # "POST" (JSON body) or "GET" (URL parameters).
  key_env: str  # Environment variable holding the API key.
  key_header: str  # Header the key is sent in.
  key_prefix: str  # Written before the key ("Bearer ").
  query_field: str  # Request field of the query.
  count_field: str  # Request field of the number of results.
  results_path: str  # Dotted path of the answer's result list.
  url_field: str  # A result's URL field.
  title_field: str  # A result's title field.
  snippet_field: str  # A result's snippet field.
  cache_dir: str  # Cache folder ("": $MGRPO_JAX_CACHE/web).
  replay: bool  # Serve the cache only, never the network.
  timeout_s: float  # Seconds one try may take.
  retries: int  # Tries after the first on timeouts, 429, 5xx.
  backoff_s: float  # First wait between tries (doubling).
  max_backoff_s: float  # Longest wait (Retry-After included).
  min_interval_s: float  # Least seconds between requests to one host.
  max_bytes: int  # Most bytes of an answer read.


def check_tools_config(config) -> str:
  """The backend `config.tools` names ("local" without a tools section),
  after checking its fields: ConfigError naming the field, the value and
  what was expected. Reads the config only."""
  if "tools" not in config:
    return "local"
  backend = choice(config, "tools.backend", BACKENDS)
  p = "tools.web"
  if backend == "local" and "web" not in config.tools:
    return backend
  if not isinstance(get(config, p), ml_collections.ConfigDict):
    fail(p, config.tools.web, "a section of web backend fields")
  try:  # Also refuses fields WebConfig does not have.
    WebConfig(**config.tools.web.to_dict())
  except TypeError as e:
    raise ConfigError(f"config.{p}: {e}") from e
  choice(config, f"{p}.method", METHODS)
  for field in ("key_env", "key_header", "query_field", "count_field",
                "url_field", "title_field", "snippet_field"):
    string(config, f"{p}.{field}", empty=False)
  for field in ("key_prefix", "results_path", "cache_dir"):
    string(config, f"{p}.{field}")
  boolean(config, f"{p}.replay")
  number(config, f"{p}.timeout_s", minimum=0.0, open_min=True)
  integer(config, f"{p}.retries", minimum=0)
  for field in ("backoff_s", "max_backoff_s", "min_interval_s"):
    number(config, f"{p}.{field}", minimum=0.0)
  integer(config, f"{p}.max_bytes", minimum=1)
  endpoint = string(config, f"{p}.endpoint")
  if backend == "web" and not is_web_url(endpoint):
    fail(f"{p}.endpoint", endpoint, "the search API's http(s) URL when "
         "config.tools.backend='web' (e.g. https://google.serper.dev/search)")
  return backend


def _dig(value: Any, path: str) -> Any:
  """value[a][b] for path "a.b" ("" is value itself); None if absent."""
  for part in filter(None, path.split(".")):
    if not isinstance(value, Mapping) or part not in value:
      return None
    value = value[part]
  return value


def _is_text(content_type: str | None, body: bytes) -> bool:
  """Text-like media types (text/*, XML, JSON); with none given, a body
  without NUL bytes."""
  if content_type is None:
    return b"\x00" not in body[:1024]
  return (content_type.startswith("text/")
          or content_type.endswith(("/xml", "+xml", "/json", "+json")))


def _decode(body: bytes, charset: str | None, html: bool) -> str:
  if charset:
    try:
      return body.decode(charset, errors="replace")
    except LookupError:
      pass
  if html:  # The charset is in a <meta> tag, or guessed.
    from trafilatura.utils import decode_file  # pylint: disable=g-import-not-at-top
    return decode_file(body)
  return body.decode("utf-8", errors="replace")


def page_text(html: str, url: str) -> tuple[str, str]:
  """(title, readable text) of an HTML page: trafilatura's main text, else
  all of its text; a parser failure falls back to stripping the tags."""
  import trafilatura  # pylint: disable=g-import-not-at-top
  try:
    text = (trafilatura.extract(html, url=url, include_comments=False,
                                favor_recall=True)
            or trafilatura.html2txt(html))
    meta = trafilatura.extract_metadata(html)
    title = (meta.title if meta is not None else None) or url
  except Exception as e:  # pylint: disable=broad-except
    logging.warning("trafilatura failed on %s (%r); stripping tags", url, e)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]*>", " ", html))
    title = url
  return title.strip(), text.strip()


class WebBackend:
  """search() over a web-search API and fetch() of web pages (module
  docstring); `errors` counts failures by kind, `counts` the calls."""

  def __init__(self, config: WebConfig, *,
               client: HttpClient | None = None):
    self.config = config
    self.client = client or HttpClient(
        timeout_s=config.timeout_s, retries=config.retries,
        backoff_s=config.backoff_s, max_backoff_s=config.max_backoff_s,
        min_interval_s=config.min_interval_s, max_bytes=config.max_bytes)
    self.cache = ResponseCache(config.cache_dir
                               or disk_cache.cache_root() / "web")
    self.errors: collections.Counter[str] = collections.Counter()
    self.counts: collections.Counter[str] = collections.Counter()
    if not config.replay and not os.environ.get(config.key_env):
      logging.warning("web backend: $%s is not set; a search the cache "
                      "lacks answers 'no API key'.", config.key_env)

  # ---------------------------------------------------------- SearchBackend

  def search(self, query: str, k: int) -> list[SearchHit]:
    self.counts["searches"] += 1
    query = str(query).strip()
    if not query:
      return []
    c = self.config
    k = max(1, min(int(k), MAX_K))
    params = {c.query_field: query, c.count_field: k}
    entry = self._exchange("search", c.method, c.endpoint, params)
    if entry.get("truncated"):
      raise self._error("too_large", "Error: the search service's answer "
                        f"was larger than {c.max_bytes} bytes; "
                        + _ADVICE["search"])
    try:
      answer = json.loads(entry.get("text") or "")
    except ValueError:
      answer = None
    results = _dig(answer, c.results_path)
    if not isinstance(results, list):
      raise self._error("bad_json", "Error: the search service's answer "
                        f"was not JSON with a list at {c.results_path!r}; "
                        + _ADVICE["search"])
    hits = []
    for item in results:
      url = _dig(item, c.url_field)
      if isinstance(url, str) and url:
        title, snippet = _dig(item, c.title_field), _dig(item,
                                                         c.snippet_field)
        hits.append(SearchHit(url, str(title or url), str(snippet or ""),
                              1.0 / (len(hits) + 1)))
    if results and not hits:
      raise self._error("bad_json", "Error: the search service's results "
                        f"have no {c.url_field!r} field; "
                        + _ADVICE["search"])
    return hits[:k]

  def fetch(self, doc_id: str) -> Document:
    self.counts["visits"] += 1
    url = str(doc_id).strip()
    if not is_web_url(url):
      raise self._error("bad_url", f"Error: {doc_id!r} is not a web page "
                        "address; visit takes a URL (http:// or https://) "
                        "from a search result.")
    entry = self._exchange("page", "GET", url, {})
    if entry.get("text") is None:
      raise self._error("binary_page", f"Error: the page {url} is not text "
                        f"({entry.get('content_type')}); "
                        + _ADVICE["page"])
    text, title = entry["text"], url
    if entry.get("content_type") in _HTML and "<" in text:
      title, text = page_text(text, url)
    if not text:
      raise self._error("empty_page", f"Error: the page {url} has no "
                        "readable text; " + _ADVICE["page"])
    if entry.get("truncated"):  # Read, but counted: the page was cut.
      self.errors["too_large"] += 1
      title += f" (first {self.config.max_bytes} bytes of a larger page)"
    return Document(url, title, text)

  # ---------------------------------------------------------------- figures

  def figures(self) -> dict[str, float]:
    """`tools/errors/<kind>` for every kind (0 included, so runs compare
    key for key), `tools/searches`, `tools/visits` (calls),
    `tools/cache_hits` and `tools/http_tries` (network tries, retries
    included)."""
    out = {f"tools/errors/{kind}": float(self.errors[kind])
           for kind in ERROR_KINDS}
    for name in ("searches", "visits", "cache_hits"):
      out[f"tools/{name}"] = float(self.counts[name])
    out["tools/http_tries"] = float(self.client.tries)
    return out

  # -------------------------------------------------------------- internals

  def _error(self, kind: str, message: str) -> ToolError:
    self.errors[kind] += 1
    return ToolError(message)

  def _exchange(self, what: str, method: str, endpoint: str,
                params: Mapping[str, Any]) -> dict[str, Any]:
    """The cached or fresh answer to a request, as a cache entry (a
    failure raises ToolError). Live runs ask again where the cache holds
    a transient failure; replay serves it."""
    key = request_key(method, endpoint, params)
    entry = self.cache.get(key)
    if entry is not None and (self.config.replay
                              or not entry.get("transient")):
      self.counts["cache_hits"] += 1
    elif self.config.replay:
      raise self._error("cache_miss", "Error: this "
                        + ("search" if what == "search" else "page")
                        + " is not in the replay cache (replay never "
                        "goes online); " + _ADVICE[what])
    else:
      entry = self._ask(what, method, endpoint, params)
      self.cache.put(key, entry)
    failure = entry.get("failure")
    if failure:
      subject = ("the search service" if what == "search"
                 else f"the page {endpoint}")
      raise self._error(str(failure), f"Error: {subject} "
                        f"{entry.get('detail', 'failed')}; " + _ADVICE[what])
    return entry

  def _ask(self, what: str, method: str, endpoint: str,
           params: Mapping[str, Any]) -> dict[str, Any]:
    """One exchange over the network, as a cache entry."""
    request = {"method": method, "endpoint": endpoint, "params": dict(params)}
    c = self.config
    headers, data, url = {}, None, endpoint
    if what == "search":
      key = os.environ.get(c.key_env)
      if not key:  # Not cached: a key set later makes the request.
        raise self._error("no_key", "Error: web search is unavailable (no "
                          "API key is set); answer with what you have.")
      headers[c.key_header] = c.key_prefix + key
      if method == "GET":
        url = _with_query(endpoint, params)
      else:
        headers["Content-Type"] = "application/json"
        data = json.dumps(dict(params)).encode("utf-8")
    try:
      answer = self.client.request(method, url, data=data, headers=headers)
    except WebFailure as e:
      return {"request": request, "failure": e.kind, "detail": e.detail,
              "transient": e.transient}
    html = answer.content_type in _HTML
    text = (_decode(answer.body, answer.charset, html)
            if _is_text(answer.content_type, answer.body) else None)
    return {"request": request, "content_type": answer.content_type,
            "text": text, "truncated": answer.truncated,
            "bytes": len(answer.body)}


def _with_query(endpoint: str, params: Mapping[str, Any]) -> str:
  joiner = "&" if "?" in endpoint else "?"
  return endpoint + joiner + urllib.parse.urlencode(dict(params))
