"""A fault-injecting HTTP proxy on loopback, between GCS clients and the emulator.

This is the one fake in the GCS tests, and it says so: the emulator never
fails on demand, so this proxy makes some requests fail the way GCS and
networks do: a 503, a connection reset before the request reaches the
server, or the server's response dropped after the write took effect.
Faults come at a set rate from a seeded generator, bounded in count and
time, or deterministically from rules that name the request (method, object
name, create or update); everything else is forwarded byte for byte.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

FAULTS = ("503", "reset", "drop_after_effect")


@dataclass
class FaultRule:
    """Inject `kind` into the first `times` requests that match every given filter.

    `object` is a regular expression searched in the object's name (from the
    URL path, the `name` query parameter or an upload's metadata), `method`
    the HTTP method, `precondition` "create" (ifGenerationMatch=0) or "update"
    (ifGenerationMatch=<a generation>). `hits` lists the requests it faulted.
    """

    kind: str
    object: str | None = None
    method: str | None = None
    precondition: str | None = None
    times: int = 1
    hits: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        assert self.kind in FAULTS, self.kind
        assert self.precondition in (None, "create", "update"), self.precondition

    def matches(self, method: str, name: str | None, query: dict[str, list[str]]) -> bool:
        if len(self.hits) >= self.times:
            return False
        if self.method is not None and method != self.method:
            return False
        if self.object is not None and (name is None or not re.search(self.object, name)):
            return False
        if self.precondition is not None:
            generation = query.get("ifGenerationMatch", [None])[0]
            if generation is None or (generation == "0") != (self.precondition == "create"):
                return False
        return True


@dataclass
class FaultPlan:
    """Random faults at `rate` (bounded by `max_faults` and `seconds`), plus the `rules`, which always apply."""

    rate: float = 0.1
    max_faults: int = 40
    seconds: float = 600.0
    seed: int = 1
    kinds: tuple[str, ...] = FAULTS
    rules: list[FaultRule] = field(default_factory=list)
    injected: dict[str, int] = field(default_factory=lambda: {kind: 0 for kind in FAULTS})
    requests: int = 0


_UPLOAD_NAME = re.compile(rb'"name"\s*:\s*("(?:[^"\\]|\\.)*")')


def object_name(path: str, body: bytes) -> str | None:
    """The object a GCS JSON API request is about, or None (bucket and list requests)."""
    parts = urlsplit(path)
    query = parse_qs(parts.query)
    match = re.match(r"^(?:/upload|/download)?/storage/v1/b/[^/]+/o/([^/]+)", parts.path)
    if match:
        return unquote(match.group(1))
    if "name" in query:
        return query["name"][0]
    if parts.path.startswith("/upload/") and body:
        found = _UPLOAD_NAME.search(body[:65536])  # the metadata part leads a multipart upload
        if found:
            return json.loads(found.group(1))
    return None


class FaultProxy:
    def __init__(self, upstream: str, plan: FaultPlan) -> None:
        self.upstream_url = upstream
        self.upstream = urlsplit(upstream)
        self.stopped = False
        self._connections: set[socket.socket] = set()
        self.plan = plan
        self._random = random.Random(plan.seed)
        self._lock = threading.Lock()
        self._started = time.monotonic()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy._connections.add(self.connection)

            def finish(self) -> None:
                with proxy._lock:
                    proxy._connections.discard(self.connection)
                super().finish()

            def _handle(self) -> None:
                if proxy.stopped:  # a kept-alive connection must not outlive stop()
                    _reset(self)
                    return
                proxy.forward(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # resets are on purpose
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _choose(self, handler: BaseHTTPRequestHandler, body: bytes) -> str | None:
        with self._lock:
            plan = self.plan
            plan.requests += 1
            if plan.rules:
                name = object_name(handler.path, body)
                query = parse_qs(urlsplit(handler.path).query)
                for rule in plan.rules:
                    if rule.matches(handler.command, name, query):
                        rule.hits.append(f"{handler.command} {name} {handler.path}")
                        plan.injected[rule.kind] += 1
                        return rule.kind
            if plan.rate <= 0:
                return None
            if sum(plan.injected.values()) >= plan.max_faults:
                return None
            if time.monotonic() - self._started > plan.seconds:
                return None
            if self._random.random() >= plan.rate:
                return None
            kind = self._random.choice(plan.kinds)
            plan.injected[kind] += 1
            return kind

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        fault = self._choose(handler, body)
        if fault == "503":
            handler.send_response(503)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        if fault == "reset":
            _reset(handler)
            return
        upstream = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=120)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "connection")}
        upstream.request(handler.command, handler.path, body=body, headers=headers)
        response = upstream.getresponse()
        data = response.read()
        upstream.close()
        if fault == "drop_after_effect":
            _reset(handler)
            return
        handler.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() in ("transfer-encoding", "connection", "content-length"):
                continue
            if key.lower() == "location":  # resumable sessions must come back through us
                value = value.replace(f"{self.upstream.scheme}://{self.upstream.netloc}", self.url)
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)

    def stop(self) -> None:
        """Stop listening and cut every open connection: nothing passes through after this."""
        self.stopped = True
        self.server.shutdown()
        self.server.server_close()
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


def use_gcs_endpoint(url: str) -> None:
    """Point this process's gs:// client at `url`: the variable, and no cached client for another endpoint."""
    from spark_webdataset.storage import gcs

    os.environ["STORAGE_EMULATOR_HOST"] = url
    cached = getattr(gcs, "_client_for_process", None)
    if cached is not None and hasattr(cached, "cache_clear"):
        cached.cache_clear()  # drops clients (and their kept-alive connections) for other endpoints
    endpoint = gcs.client()._connection.API_BASE_URL
    assert endpoint == url, f"the gs:// client still talks to {endpoint}, not {url}"


@contextlib.contextmanager
def gcs_through(upstream: str, plan: FaultPlan) -> Iterator[FaultProxy]:
    """Inside the block this process's gs:// calls pass a FaultProxy; after it, they go to `upstream` again."""
    proxy = FaultProxy(upstream, plan)
    try:
        use_gcs_endpoint(proxy.url)
        yield proxy
    finally:
        proxy.stop()
        use_gcs_endpoint(upstream)


def _reset(handler: BaseHTTPRequestHandler) -> None:
    """Close with RST, as a dropped connection looks to the client."""
    sock: socket.socket = handler.connection
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.close_connection = True
    sock.close()
