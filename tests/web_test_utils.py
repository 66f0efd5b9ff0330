"""A fake web on 127.0.0.1 for the web backend's tests (never a real service).

`FakeWeb` serves routes from a thread on an ephemeral port: each path gives
a `Reply` (or a function of the request giving one), and `queue(path, ...)`
puts replies in front of it, answered once each in order (429 then 200).
A reply can wait before answering (a service that times out). Every request
is recorded (method, path, headers, body).
"""

from __future__ import annotations

import collections
import dataclasses
import http.server
import json
import threading
import time
from typing import Any, Callable


@dataclasses.dataclass
class Reply:
  status: int = 200
  body: bytes = b""
  content_type: str | None = "text/html; charset=utf-8"  # None: no header.
  headers: dict = dataclasses.field(default_factory=dict)
  delay_s: float = 0.0  # Seconds to wait before answering.


@dataclasses.dataclass(frozen=True)
class Request:
  method: str
  path: str
  headers: Any  # Case-insensitive (an http.client.HTTPMessage).
  body: bytes

  def json(self):
    return json.loads(self.body)


def json_reply(value, **kwargs) -> Reply:
  return Reply(body=json.dumps(value).encode(),
               content_type="application/json", **kwargs)


def html_page(title: str, *paragraphs: str) -> Reply:
  body = "".join(f"<p>{p}</p>" for p in paragraphs)
  return Reply(body=(
      f"<html><head><title>{title}</title></head><body>"
      "<nav><a href='/'>Home</a> | <a href='/about'>About</a></nav>"
      f"<article><h1>{title}</h1>{body}</article>"
      "<footer>Copyright the fake web</footer></body></html>").encode())


class FakeWeb:
  """The server; use as a context manager (or call close())."""

  def __init__(self, routes: dict[str, Reply | Callable[[Request], Reply]]
               | None = None):
    self.routes = dict(routes or {})
    self.queued: dict[str, collections.deque] = collections.defaultdict(
        collections.deque)
    self.requests: list[Request] = []
    self._lock = threading.Lock()
    web = self

    class Handler(http.server.BaseHTTPRequestHandler):
      protocol_version = "HTTP/1.1"

      def log_message(self, *args):  # Quiet.
        pass

      def _serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        request = Request(self.command, self.path, self.headers,
                          self.rfile.read(length))
        reply = web._reply(request)
        time.sleep(reply.delay_s)
        try:
          self.send_response(reply.status)
          if reply.content_type is not None:
            self.send_header("Content-Type", reply.content_type)
          for name, value in reply.headers.items():
            self.send_header(name, value)
          self.send_header("Content-Length", str(len(reply.body)))
          self.end_headers()
          self.wfile.write(reply.body)
        except (BrokenPipeError, ConnectionResetError):
          pass  # The client gave up (a timeout test).

      do_GET = do_POST = _serve  # noqa: N815

    self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self._server.daemon_threads = True
    self._server.block_on_close = False
    self.port = self._server.server_address[1]
    self._thread = threading.Thread(target=self._server.serve_forever,
                                    kwargs={"poll_interval": 0.02},
                                    daemon=True)
    self._thread.start()

  def url(self, path: str) -> str:
    return f"http://127.0.0.1:{self.port}{path}"

  def queue(self, path: str, *replies: Reply) -> None:
    with self._lock:
      self.queued[path].extend(replies)

  def hits(self, path: str) -> int:
    """Requests made to `path` (its query string ignored)."""
    return sum(r.path.split("?")[0] == path for r in self.requests)

  def _reply(self, request: Request) -> Reply:
    path = request.path.split("?")[0]
    with self._lock:
      self.requests.append(request)
      if self.queued[path]:
        return self.queued[path].popleft()
    route = self.routes.get(path)
    if route is None:
      return Reply(404, b"not found", "text/plain")
    return route(request) if callable(route) else route

  def close(self) -> None:
    self._server.shutdown()
    self._server.server_close()

  def __enter__(self) -> FakeWeb:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def kelto_web(monkeypatch) -> FakeWeb:
  """A fake search API whose one result is the page "Kelto" (the Sorn flows
  through it), with the proxies that would intercept 127.0.0.1 unset."""
  for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
    monkeypatch.delenv(name, raising=False)
  web = FakeWeb({"/kelto": html_page("Kelto", "The Sorn flows through "
                                     "Kelto.")})
  web.routes["/search"] = json_reply({"organic": [
      {"link": web.url("/kelto"), "title": "Kelto",
       "snippet": "The Sorn flows through Kelto."}]})
  return web


def search_kelto(config, web: FakeWeb) -> None:
  """Points `config` (an evaluation or training config) at `web` and seeds
  both agents' first turns to delegate, then search, for Kelto's river (so
  a random model's rollouts reach the web)."""
  config.agents.main.first_turn_prefix = (
      '<tool_call>{"name": "delegate", "arguments": {"task": "Find the '
      'river of Kelto."}}</tool_call>')
  config.agents.sub.first_turn_prefix = (
      '<tool_call>{"name": "search", "arguments": {"query": "Kelto '
      'river"}}</tool_call>')
  config.tools.backend = "web"
  config.tools.web.endpoint = web.url("/search")
  config.tools.web.min_interval_s = 0.0
