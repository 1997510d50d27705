"""The two AWS credential endpoints no real server here provides, as small local HTTP servers that
speak their documented protocols: the container endpoint (ECS, EKS Pod Identity: GET with an
optional Authorization header, JSON back) and EC2 instance metadata v2 (PUT a session token, GET
the role with it, GET the role's credentials with it). A fake is allowed for these only: moto has
neither, and the real ones exist only on AWS. Each answer is a fresh key, ASIA<n>, expiring
`lifetime` seconds after `now()` (a test's injected clock), so a refresh shows as a new key.
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROLE = "node-role"
IMDS_TOKEN = "imds-session-token"


class CredentialEndpoint:
    """`kind` "container" or "imds"; `requests` lists (method, path, headers) as they came."""

    def __init__(self, kind: str, lifetime: float = 3600, now: Callable[[], float] = time.time,
                 authorization: str | None = None) -> None:  # fmt: skip
        self.kind, self.lifetime, self.now, self.authorization = kind, lifetime, now, authorization
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.issued = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                endpoint._answer(self, "GET")

            def do_PUT(self) -> None:
                endpoint._answer(self, "PUT")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _keys(self) -> bytes:
        self.issued += 1
        expires = datetime.datetime.fromtimestamp(self.now() + self.lifetime, datetime.timezone.utc)
        return json.dumps({
            "Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": f"ASIA{self.issued}",
            "SecretAccessKey": f"secret-{self.issued}", "Token": f"token-{self.issued}",
            "Expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }).encode()  # fmt: skip

    def _answer(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        self.requests.append((method, handler.path, headers))
        status, body = 404, b""
        if self.kind == "container" and method == "GET":
            allowed = self.authorization is None or headers.get("authorization") == self.authorization
            status, body = (200, self._keys()) if allowed else (401, b"")
        elif self.kind == "imds":
            prefix = "/latest/meta-data/iam/security-credentials/"
            if method == "PUT" and handler.path == "/latest/api/token":
                ttl = headers.get("x-aws-ec2-metadata-token-ttl-seconds", "")
                status, body = (200, IMDS_TOKEN.encode()) if ttl.isdigit() else (400, b"")
            elif headers.get("x-aws-ec2-metadata-token") != IMDS_TOKEN:
                status = 401  # IMDSv2: no session token, no answer
            elif handler.path == prefix:
                status, body = 200, ROLE.encode()
            elif handler.path == prefix + ROLE:
                status, body = 200, self._keys()
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
