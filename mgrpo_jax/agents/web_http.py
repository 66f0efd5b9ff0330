"""HTTP for the web backend: rate limit, timeouts, retries, a byte cap.

`HttpClient.request(method, url, ...)` makes one exchange, with up to
`retries` more tries, and returns a `Response` (a 2xx answer) or raises
`WebFailure(kind, detail)`, `detail` ending the sentence "the service ...":

  timeout       no answer within timeout_s (connecting or reading), every try
  rate_limited  HTTP 429, every try
  http_error    HTTP 5xx every try, or any other status >= 300 at once
  unreachable   connection refused or reset, no such host, every try
  bad_url       not an http(s) URL (file://, ftp://, a bare word): never sent

Tries are spaced by exponential backoff (backoff_s, 2 backoff_s, 4 ...,
capped at max_backoff_s), or by the server's Retry-After header (seconds or
an HTTP date) when it gives one, capped the same. Requests to one host start
at least min_interval_s apart. At most max_bytes of a body are read
(`Response.truncated` says there was more). Only http and https are spoken,
redirects included: the opener has no file://, ftp:// or data: handler.
Standard library only (urllib).
"""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import http.client
import threading
import time
from typing import Callable, Mapping
import urllib.error
import urllib.parse
import urllib.request

USER_AGENT = "mgrpo_jax-web/0.1 (research agent evaluation)"
_CHUNK = 1 << 16  # Bytes per read while a body is capped.


@dataclasses.dataclass(frozen=True)
class Response:
  """A 2xx answer: its body (at most max_bytes) and what it says it is."""
  url: str  # The URL answered, after redirects.
  status: int
  content_type: str | None  # Media type ("text/html"); None: not given.
  charset: str | None  # The Content-Type's charset, if it names one.
  body: bytes
  truncated: bool  # True: the body was longer than max_bytes and was cut.


class WebFailure(Exception):
  """No usable answer: `kind` (module docstring), `detail` (e.g. "timed out
  after 3 tries"), `transient` (worth asking again later: timeouts, 429,
  5xx, unreachable hosts; a 404 or a bad URL is not)."""

  def __init__(self, kind: str, detail: str, *, transient: bool):
    super().__init__(f"{kind}: {detail}")
    self.kind = kind
    self.detail = detail
    self.transient = transient


class _Retry(Exception):
  """One try failed in a way another try may not."""

  def __init__(self, kind: str, detail: str,
               retry_after: float | None = None):
    super().__init__(detail)
    self.kind = kind
    self.detail = detail
    self.retry_after = retry_after


def is_web_url(url: str) -> bool:
  """An absolute http:// or https:// URL with a host."""
  try:
    parts = urllib.parse.urlsplit(url)
  except ValueError:
    return False
  return parts.scheme in ("http", "https") and bool(parts.hostname)


def retry_after_seconds(value: str | None) -> float | None:
  """Seconds a Retry-After header asks to wait (delta-seconds or an HTTP
  date); None when absent or unreadable."""
  if not value:
    return None
  value = value.strip()
  try:
    return max(0.0, float(value))
  except ValueError:
    pass
  try:
    when = email.utils.parsedate_to_datetime(value)
  except (TypeError, ValueError):
    return None
  if when.tzinfo is None:
    when = when.replace(tzinfo=datetime.timezone.utc)
  now = datetime.datetime.now(datetime.timezone.utc)
  return max(0.0, (when - now).total_seconds())


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
  """Follows redirects to http(s) only (a redirect elsewhere is an error)."""

  def redirect_request(self, req, fp, code, msg, headers, newurl):
    if not is_web_url(newurl):
      return None  # urllib then raises the 3xx as an HTTPError.
    return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener() -> urllib.request.OpenerDirector:
  opener = urllib.request.OpenerDirector()
  for handler in (urllib.request.ProxyHandler(),  # $http_proxy, $no_proxy ...
                  urllib.request.HTTPHandler(), urllib.request.HTTPSHandler(),
                  _HttpOnlyRedirects(),
                  urllib.request.HTTPDefaultErrorHandler(),
                  urllib.request.HTTPErrorProcessor()):
    opener.add_handler(handler)
  return opener


class HttpClient:
  """HTTP exchanges with the limits of the module docstring. `sleep` is
  what waits (tests pass a recorder); `tries` counts every try made."""

  def __init__(self, *, timeout_s: float = 20.0, retries: int = 2,
               backoff_s: float = 1.0, max_backoff_s: float = 30.0,
               min_interval_s: float = 0.0, max_bytes: int = 2_000_000,
               user_agent: str = USER_AGENT,
               sleep: Callable[[float], None] = time.sleep):
    self.timeout_s = timeout_s
    self.retries = retries
    self.backoff_s = backoff_s
    self.max_backoff_s = max_backoff_s
    self.min_interval_s = min_interval_s
    self.max_bytes = max_bytes
    self.user_agent = user_agent
    self.sleep = sleep
    self.tries = 0
    self._last_start: dict[str, float] = {}
    self._lock = threading.Lock()
    self._opener = _opener()

  def request(self, method: str, url: str, *, data: bytes | None = None,
              headers: Mapping[str, str] | None = None) -> Response:
    """The answer to `method url` (with body `data`), or WebFailure."""
    if not is_web_url(url):
      raise WebFailure("bad_url", "is not an http(s) URL", transient=False)
    tries = self.retries + 1
    last = None
    for attempt in range(tries):
      self._wait_turn(urllib.parse.urlsplit(url).hostname or "")
      try:
        return self._once(method, url, data, headers or {})
      except _Retry as e:
        last = e
      if attempt + 1 < tries:
        delay = (last.retry_after if last.retry_after is not None
                 else self.backoff_s * 2 ** attempt)
        self.sleep(min(delay, self.max_backoff_s))
    noun = "try" if tries == 1 else "tries"
    raise WebFailure(last.kind, f"{last.detail} after {tries} {noun}",
                     transient=True)

  def _wait_turn(self, host: str) -> None:
    """Waits until min_interval_s has passed since the last start to host."""
    with self._lock:
      now = time.monotonic()
      last = self._last_start.get(host)
      wait = 0.0 if last is None else last + self.min_interval_s - now
      if wait > 0:
        self.sleep(wait)
        now += wait
      self._last_start[host] = now

  def _once(self, method: str, url: str, data: bytes | None,
            headers: Mapping[str, str]) -> Response:
    request = urllib.request.Request(
        url, data=data, method=method,
        headers={"User-Agent": self.user_agent, **headers})
    self.tries += 1
    deadline = time.monotonic() + self.timeout_s
    timed_out = _Retry("timeout", f"timed out ({self.timeout_s:g} s a try)")
    try:
      answer = self._opener.open(request, timeout=self.timeout_s)
    except urllib.error.HTTPError as e:
      status, wait = e.code, retry_after_seconds(e.headers.get("Retry-After"))
      e.close()
      if status == 429:
        raise _Retry("rate_limited", "was rate limited (HTTP 429)",
                     wait) from None
      if status >= 500:
        raise _Retry("http_error", f"answered HTTP {status}", wait) from None
      raise WebFailure("http_error", f"answered HTTP {status}",
                       transient=False) from None
    except urllib.error.URLError as e:
      if isinstance(e.reason, TimeoutError):
        raise timed_out from None
      raise _Retry("unreachable", f"could not be reached ({e.reason})"
                   ) from None
    except TimeoutError:
      raise timed_out from None
    except (OSError, http.client.HTTPException) as e:
      raise _Retry("unreachable", f"could not be reached ({e!r})") from None
    with answer:
      try:
        body = self._read(answer, deadline)
      except TimeoutError:
        raise timed_out from None
      except (OSError, http.client.HTTPException) as e:
        raise _Retry("unreachable", f"broke off mid-answer ({e!r})"
                     ) from None
      given = answer.headers.get("Content-Type")
      return Response(
          url=answer.geturl(), status=answer.status,
          content_type=answer.headers.get_content_type() if given else None,
          charset=answer.headers.get_content_charset(),
          body=body[:self.max_bytes], truncated=len(body) > self.max_bytes)

  def _read(self, answer, deadline: float) -> bytes:
    """At most max_bytes + 1 bytes of the body (the extra byte tells a cut
    body), within the try's timeout."""
    chunks, size = [], 0
    while size <= self.max_bytes:
      chunk = answer.read(min(_CHUNK, self.max_bytes + 1 - size))
      if not chunk:
        break
      chunks.append(chunk)
      size += len(chunk)
      if time.monotonic() > deadline:
        raise TimeoutError
    return b"".join(chunks)
