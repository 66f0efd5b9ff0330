"""The tools' backend: one section, `config.tools`, of training and evaluation.

configs/default.py (training) and configs/evaluate.py both take it from here,
so a run can train against a live search API and be evaluated, or replayed
offline exactly (`tools.web.replay = True`), with the same settings.
"""

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  tools = ml_collections.ConfigDict()  # The sub-agent's search / visit backend.
  tools.backend = "local"  # "local": BM25 over the data's pages (training: config.data.corpus; evaluate: the data's or --corpus); "web": a web-search API (agents/web.py).
  tools.web = ml_collections.ConfigDict()  # The "web" backend; the defaults speak Serper's format.
  tools.web.endpoint = ""  # Search API URL, e.g. https://google.serper.dev/search (required for "web").
  tools.web.method = "POST"  # "POST": JSON body {query_field: q, count_field: k}; "GET": URL parameters.
  tools.web.key_env = "MGRPO_SEARCH_API_KEY"  # Environment variable holding the API key (never written to disk).
  tools.web.key_header = "X-API-KEY"  # Request header carrying the key (Brave: X-Subscription-Token).
  tools.web.key_prefix = ""  # Text before the key in its header, e.g. "Bearer " with Authorization.
  tools.web.query_field = "q"  # Request field holding the query.
  tools.web.count_field = "num"  # Request field holding the number of results (Brave: count).
  tools.web.results_path = "organic"  # Dotted path of the answer's result list ("" : the answer is the list; Brave: web.results).
  tools.web.url_field = "link"  # A result's URL field (Brave: url); the URL is the page id visit takes.
  tools.web.title_field = "title"  # A result's title field.
  tools.web.snippet_field = "snippet"  # A result's snippet field (Brave: description).
  tools.web.cache_dir = ""  # Where answers are cached ("": $MGRPO_JAX_CACHE/web, default ~/.cache/mgrpo_jax/web).
  tools.web.replay = False  # True: answer from the cache only, never the network (offline, exact replays).
  tools.web.timeout_s = 20.0  # Seconds one try may take (connecting and reading).
  tools.web.retries = 2  # Tries after the first on a timeout, HTTP 429 or 5xx, or a failed connection.
  tools.web.backoff_s = 1.0  # Wait before the first retry, doubled each retry (a Retry-After header wins).
  tools.web.max_backoff_s = 30.0  # Longest wait between tries, Retry-After included.
  tools.web.min_interval_s = 0.5  # Least seconds between two requests to the same host.
  tools.web.max_bytes = 2_000_000  # Most bytes of an answer read; a longer page is cut (counted as too_large).

  return tools
