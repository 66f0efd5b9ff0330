"""The web backend's HTTP client against a local server: retries, backoff,
Retry-After, timeouts, the byte cap, the rate limit, refused URLs."""

import socket

import pytest

from mgrpo_jax.agents.web_http import (HttpClient, WebFailure,
                                       retry_after_seconds)
from web_test_utils import FakeWeb, Reply


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
  for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY",
               "all_proxy", "ALL_PROXY"):
    monkeypatch.delenv(name, raising=False)


@pytest.fixture
def web():
  with FakeWeb({"/page": Reply(body=b"<p>hello</p>"),
                "/bytes": Reply(body=bytes(range(256)) * 40,
                                content_type="application/octet-stream")
                }) as server:
    yield server


def client(**kwargs):
  """A client whose waits are recorded in `.waits`, not slept."""
  waits = []
  settings = dict(timeout_s=2.0, retries=2, backoff_s=0.5, max_backoff_s=4.0,
                  min_interval_s=0.0, max_bytes=100_000, sleep=waits.append)
  c = HttpClient(**{**settings, **kwargs})
  c.waits = waits
  return c


def test_a_page_and_what_it_says_it_is(web):
  c = client()
  answer = c.request("GET", web.url("/page"))
  assert answer.status == 200 and answer.body == b"<p>hello</p>"
  assert answer.content_type == "text/html" and answer.charset == "utf-8"
  assert not answer.truncated and c.tries == 1 and c.waits == []
  assert web.requests[0].headers["User-Agent"].startswith("mgrpo_jax")


def test_429_then_success_backs_off_once(web):
  web.queue("/page", Reply(429, b"slow down", "text/plain"))
  c = client()
  assert c.request("GET", web.url("/page")).body == b"<p>hello</p>"
  assert c.tries == 2 and c.waits == [0.5]  # backoff_s, no Retry-After.


def test_retry_after_is_honoured_and_capped(web):
  web.queue("/page", Reply(429, headers={"Retry-After": "0.25"}),
            Reply(503, headers={"Retry-After": "600"}))
  c = client(max_backoff_s=3.0)
  c.request("GET", web.url("/page"))
  assert c.waits == [0.25, 3.0]


def test_5xx_backs_off_exponentially_then_fails(web):
  web.queue("/page", *[Reply(503)] * 4)
  c = client(retries=3, backoff_s=0.5, max_backoff_s=1.5)
  with pytest.raises(WebFailure) as e:
    c.request("GET", web.url("/page"))
  assert e.value.kind == "http_error" and e.value.transient
  assert e.value.detail == "answered HTTP 503 after 4 tries"
  assert c.waits == [0.5, 1.0, 1.5]  # 0.5, 1, 2 capped at 1.5.
  assert web.hits("/page") == 4


def test_always_429_is_rate_limited(web):
  web.queue("/page", *[Reply(429)] * 3)
  with pytest.raises(WebFailure) as e:
    client().request("GET", web.url("/page"))
  assert e.value.kind == "rate_limited"
  assert e.value.detail == "was rate limited (HTTP 429) after 3 tries"


def test_4xx_is_not_retried(web):
  c = client()
  with pytest.raises(WebFailure) as e:
    c.request("GET", web.url("/missing"))
  assert (e.value.kind, e.value.detail) == ("http_error", "answered HTTP 404")
  assert not e.value.transient and c.tries == 1 and c.waits == []


def test_a_slow_service_times_out_with_real_tiny_waits(web):
  web.queue("/page", Reply(delay_s=0.6), Reply(delay_s=0.6))
  c = HttpClient(timeout_s=0.15, retries=1, backoff_s=0.01,
                 max_backoff_s=0.05)
  with pytest.raises(WebFailure) as e:
    c.request("GET", web.url("/page"))
  assert e.value.kind == "timeout" and e.value.transient
  assert e.value.detail.endswith("after 2 tries") and c.tries == 2


def test_the_body_is_capped(web):
  c = client(max_bytes=1000)
  answer = c.request("GET", web.url("/bytes"))
  assert answer.truncated and answer.body == (bytes(range(256)) * 4)[:1000]
  assert answer.content_type == "application/octet-stream"
  assert not c.request("GET", web.url("/page")).truncated


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://x.org/a",
                                 "data:text/plain,hi", "d1", "http://",
                                 "javascript:alert(1)"])
def test_only_http_urls_are_sent(url):
  c = client()
  with pytest.raises(WebFailure) as e:
    c.request("GET", url)
  assert e.value.kind == "bad_url" and not e.value.transient
  assert c.tries == 0


def test_redirects_follow_http_only(web):
  web.routes["/to-page"] = Reply(302, headers={"Location": "/page"})
  web.routes["/to-file"] = Reply(302, headers={"Location": "file:///etc/"
                                               "passwd"})
  c = client()
  assert c.request("GET", web.url("/to-page")).body == b"<p>hello</p>"
  with pytest.raises(WebFailure) as e:
    c.request("GET", web.url("/to-file"))
  assert (e.value.kind, e.value.detail) == ("http_error", "answered HTTP 302")


def test_requests_to_one_host_are_spaced(web):
  c = client(min_interval_s=30.0)
  c.request("GET", web.url("/page"))
  c.request("GET", web.url("/page"))
  # The second start waited what was left of the interval; another host
  # (localhost, the same server) does not wait.
  assert len(c.waits) == 1 and 29.0 < c.waits[0] <= 30.0
  c.request("GET", f"http://localhost:{web.port}/page")
  assert len(c.waits) == 1


def test_a_closed_port_is_unreachable():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  c = client(retries=1)
  with pytest.raises(WebFailure) as e:
    c.request("GET", f"http://127.0.0.1:{port}/")
  assert e.value.kind == "unreachable" and e.value.transient
  assert c.tries == 2 and c.waits == [0.5]


def test_retry_after_values():
  assert retry_after_seconds("3") == 3.0
  assert retry_after_seconds(None) is None
  assert retry_after_seconds("soon") is None
  assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # Past.
  assert 3000 < retry_after_seconds("Fri, 01 Jan 2100 00:00:00 GMT")
