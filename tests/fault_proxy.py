"""A fault-injecting HTTP proxy on loopback, between GCS clients and the emulator.

This is the one fake in the GCS tests, and it says so: the emulator never
fails on demand, so this proxy makes some requests fail the way GCS and
networks do: a 503, a connection reset before the request reaches the
server, or the server's response dropped after the write took effect.
Faults come at a set rate from a seeded generator, bounded in count and
time; everything else is forwarded byte for byte.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

FAULTS = ("503", "reset", "drop_after_effect")


@dataclass
class FaultPlan:
    rate: float = 0.1
    max_faults: int = 40
    seconds: float = 600.0
    seed: int = 1
    kinds: tuple[str, ...] = FAULTS
    injected: dict[str, int] = field(default_factory=lambda: {kind: 0 for kind in FAULTS})
    requests: int = 0


class FaultProxy:
    def __init__(self, upstream: str, plan: FaultPlan) -> None:
        self.upstream = urlsplit(upstream)
        self.plan = plan
        self._random = random.Random(plan.seed)
        self._lock = threading.Lock()
        self._started = time.monotonic()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _handle(self) -> None:
                proxy.forward(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # resets are on purpose
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _choose(self) -> str | None:
        with self._lock:
            plan = self.plan
            plan.requests += 1
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
        fault = self._choose()
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
        self.server.shutdown()
        self.server.server_close()


def _reset(handler: BaseHTTPRequestHandler) -> None:
    """Close with RST, as a dropped connection looks to the client."""
    sock: socket.socket = handler.connection
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.close_connection = True
    sock.close()
