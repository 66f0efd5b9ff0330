"""A local Google Cloud Storage emulator, for testing the store's gs:// backend.

Wraps PyPI's `gcp-storage-emulator` (a test-only dependency) so that both
clients the store uses can talk to it:
  * tensorstore (Orbax's array writes, the store's step records) needs every
    object download to carry the `x-goog-generation` header, which the
    emulator leaves out; `_patch_downloads` adds it;
  * tensorstore lists a key range with `startOffset`/`endOffset`, which the
    emulator ignores (it would list the whole bucket); `_patch_listings`
    applies them;
  * tensorstore and Orbax issue many requests at once: the server accepts
    them on threads but handles them one at a time (the emulator's in-memory
    storage is not thread-safe).

Usage:
  with gcs_emulator.serve(bucket="test-bucket") as emulator:
    os.environ.update(emulator.env)   # or monkeypatch.setenv for each
    store.open_store("gs://test-bucket/run")

Nothing leaves the machine: the server listens on 127.0.0.1 only, and the
environment it hands back points every client at it, with a fake token (and
anonymous gcsfs) so no client looks for real credentials or probes a metadata
server. The env must be in place before gcsfs is first imported (it reads
GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT at import).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import http.server
import logging as std_logging
import sys
import threading
import types
from typing import Iterator

from absl import logging

_GENERATION_HEADER = "x-goog-generation"
_METAGENERATION_HEADER = "x-goog-metageneration"
_UNSET = object()


@dataclasses.dataclass(frozen=True)
class Emulator:
  """A running emulator.

  Attributes:
    url: base URL, e.g. "http://127.0.0.1:41234".
    bucket: the bucket created at start.
    env: environment variables that point the store's GCS clients (gcsfs,
      tensorstore, etils.epath) at this emulator, without credentials.
  """
  url: str
  bucket: str
  env: dict[str, str]


def _with_generation(download):
  """Wraps the emulator's download handler to add the generation headers."""
  if getattr(download, "_adds_generation", False):
    return download

  @functools.wraps(download)
  def wrapped(request, response, storage, *args, **kwargs):
    download(request, response, storage, *args, **kwargs)
    if response.status.value < 300:
      obj = storage.get_file_obj(request.params["bucket_name"],
                                 request.params["object_id"])
      response[_GENERATION_HEADER] = str(obj["generation"])
      response[_METAGENERATION_HEADER] = str(obj["metageneration"])

  wrapped._adds_generation = True  # pylint: disable=protected-access
  return wrapped


def _patch_downloads() -> None:
  """Makes every download route of the emulator send `x-goog-generation`.

  Idempotent. `objects.get` (alt=media) calls the module-level `download`;
  the routing table holds direct references, replaced in place.
  """
  # pylint: disable=g-import-not-at-top
  from gcp_storage_emulator import server
  from gcp_storage_emulator.handlers import objects
  objects.download = _with_generation(objects.download)
  for _, methods in server.HANDLERS:
    for method, handler in methods.items():
      if getattr(handler, "__name__", "") == "download":
        methods[method] = _with_generation(handler)


def _locked_handler(storage, lock: threading.Lock):
  """A request handler class that handles one parsed request at a time."""
  from gcp_storage_emulator import server  # pylint: disable=g-import-not-at-top

  def locked(method):
    def handle(self):
      with lock:
        method(self)
    return handle

  class Handler(server.RequestHandler):

    def __init__(self, *args, **kwargs):
      super().__init__(storage, *args, **kwargs)

    do_GET = locked(server.RequestHandler.do_GET)
    do_POST = locked(server.RequestHandler.do_POST)
    do_PUT = locked(server.RequestHandler.do_PUT)
    do_DELETE = locked(server.RequestHandler.do_DELETE)
    do_PATCH = locked(server.RequestHandler.do_PATCH)

  return Handler


def _with_offsets(ls):
  """Wraps the emulator's object listing to keep names in
  [startOffset, endOffset), as GCS does."""
  if getattr(ls, "_applies_offsets", False):
    return ls

  @functools.wraps(ls)
  def wrapped(request, response, storage, *args, **kwargs):
    start = (request.query.get("startOffset") or [""])[0]
    end = (request.query.get("endOffset") or [None])[0]

    def get_file_list(*list_args, **list_kwargs):
      files, prefixes = storage.get_file_list(*list_args, **list_kwargs)
      return [f for f in files if start <= f["name"]
              and (end is None or f["name"] < end)], prefixes

    ls(request, response, types.SimpleNamespace(get_file_list=get_file_list),
       *args, **kwargs)

  wrapped._applies_offsets = True  # pylint: disable=protected-access
  return wrapped


def _patch_listings() -> None:
  """Makes the emulator's object listing honour startOffset/endOffset.

  Idempotent; the routing table's reference is replaced in place.
  """
  # pylint: disable=g-import-not-at-top
  from gcp_storage_emulator import server
  from gcp_storage_emulator.handlers import objects
  objects.ls = _with_offsets(objects.ls)
  for _, methods in server.HANDLERS:
    for method, handler in methods.items():
      if getattr(handler, "__name__", "") == "ls":
        methods[method] = _with_offsets(handler)


class _Server(http.server.ThreadingHTTPServer):
  """Threads per connection; a client that hangs up early is not an error."""
  daemon_threads = True

  def handle_error(self, request, client_address):
    del request
    logging.debug("gcs emulator: error serving %s", client_address,
                  exc_info=True)


def emulator_env(url: str) -> dict[str, str]:
  """Environment that points gcsfs, tensorstore and etils.epath at `url`."""
  return {
      # gcsfs (used by etils.epath, hence by Orbax's directory operations).
      "STORAGE_EMULATOR_HOST": url,
      # tensorstore's gcs kvstore driver (Orbax's arrays, the store's records).
      "TENSORSTORE_GCS_HTTP_URL": url,
      # A fixed bearer token: tensorstore then never looks for credentials.
      "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",
      # epath: fsspec/gcsfs rather than tf.io.gfile even if TF is installed.
      "EPATH_USE_TF": "false",
      # gcsfs: no zonal/HNS probing (it would call the real control API).
      "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
      # gcsfs: anonymous requests, so google.auth never probes for a
      # metadata server (read by fsspec at import: for child processes;
      # `serve` sets it in this process).
      "FSSPEC_GCS_TOKEN": "anon",
      "NO_GCE_CHECK": "true",
  }


def _forget_gcs_clients() -> None:
  """Drops cached gcsfs instances, which keep the endpoint they were made with.

  Also etils.epath's own cache of its fsspec filesystems (private, so that a
  second emulator on another port is reached in the same process).
  """
  if "gcsfs" in sys.modules:
    sys.modules["gcsfs"].GCSFileSystem.clear_instance_cache()
  from etils.epath import backend  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=protected-access
  backend.fsspec_backend._get_filesystem.cache_clear()


@contextlib.contextmanager
def _anonymous_gcsfs() -> Iterator[None]:
  """gcsfs instances made in this process use no credentials, meanwhile."""
  import fsspec  # pylint: disable=g-import-not-at-top
  gcs_conf = fsspec.config.conf.setdefault("gcs", {})
  saved = gcs_conf.get("token", _UNSET)
  gcs_conf["token"] = "anon"
  _forget_gcs_clients()
  try:
    yield
  finally:
    if saved is _UNSET:
      gcs_conf.pop("token", None)
    else:
      gcs_conf["token"] = saved
    _forget_gcs_clients()


@contextlib.contextmanager
def _quiet_emulator_log() -> Iterator[None]:
  """The emulator logs each lookup of a missing object (routine for
  tensorstore and Orbax) as an ERROR: keep only its critical messages."""
  emulator_logger = std_logging.getLogger("gcp_storage_emulator")
  saved = emulator_logger.level
  emulator_logger.setLevel(std_logging.CRITICAL)
  try:
    yield
  finally:
    emulator_logger.setLevel(saved)


@contextlib.contextmanager
def serve(bucket: str = "test-bucket") -> Iterator[Emulator]:
  """Runs an in-memory emulator on 127.0.0.1 (a free port) with `bucket`."""
  # pylint: disable=g-import-not-at-top
  from gcp_storage_emulator.handlers import buckets
  from gcp_storage_emulator.storage import Storage

  _patch_downloads()
  _patch_listings()
  storage = Storage(use_memory_fs=True)
  buckets.create_bucket(bucket, storage)
  # Port 0: the OS picks a free port.
  httpd = _Server(("127.0.0.1", 0), _locked_handler(storage, threading.Lock()))
  thread = threading.Thread(target=httpd.serve_forever, name="gcs-emulator",
                            daemon=True)
  thread.start()
  url = f"http://127.0.0.1:{httpd.server_address[1]}"
  try:
    with _anonymous_gcsfs(), _quiet_emulator_log():
      yield Emulator(url=url, bucket=bucket, env=emulator_env(url))
  finally:
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)
