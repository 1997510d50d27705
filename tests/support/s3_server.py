"""A real S3 API (moto in server mode) on 127.0.0.1 for a test session.

moto needs botocore, which needs python-dateutil < 3, while the project pins 4.0.0: so the server
runs from its own venv, `.venv/s3server` (scripts/install_s3server.sh), as fake-gcs-server runs
from its own binary. Clients reach it through AWS_ENDPOINT_URL and dummy credentials, set by
`reserve_environment()` when conftest is imported, before any Spark JVM starts: Spark's Python
workers inherit the JVM's environment, as they do STORAGE_EMULATOR_HOST.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

MOTO_ENV = "SPARK_WEBDATASET_MOTO_SERVER"


def moto_server_binary() -> Path:
    configured = os.environ.get(MOTO_ENV)
    if configured:
        return Path(configured)
    return Path(sys.prefix) / "s3server" / "bin" / "moto_server"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def reserve_environment() -> None:
    """Point every S3 client of the session (and of its Spark workers and subprocesses) at a port
    the server will take when first asked for: dummy credentials, a region, no real AWS."""
    os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{_free_port()}"
    os.environ["AWS_ACCESS_KEY_ID"] = "testing"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
    os.environ["AWS_REGION"] = "us-east-1"
    # The credential chain's last sources are network services (storage/s3_config.py): a test that
    # falls through to them must find nothing, and never ask this host's instance metadata
    # (169.254.169.254) or read its ~/.aws files.
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    os.environ["AWS_CONFIG_FILE"] = os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    for name in (
        "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "SPARK_WEBDATASET_S3_BUCKET_PROFILES",
    ):  # fmt: skip
        os.environ.pop(name, None)


class S3Server:
    """moto_server on the reserved endpoint; stopped at the end of the session."""

    def __init__(self, url: str) -> None:
        self.url = url
        port = int(url.rsplit(":", 1)[1])
        binary = moto_server_binary()
        if not binary.exists():
            raise RuntimeError(f"{binary}: no moto server; run scripts/install_s3server.sh (or set {MOTO_ENV})")
        self.process = subprocess.Popen(
            [str(binary), "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.process.returncode} (port {port} taken?)")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto_server did not listen on {url} within 60 s")

    def create_bucket(self, name: str) -> str:
        from spark_webdataset.storage.s3 import client

        response = client().request("PUT", name)
        if response.status != 200:
            raise RuntimeError(f"creating bucket {name}: HTTP {response.status} {response.body[:200]!r}")
        return f"s3://{name}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
