"""The data source over Spark Connect: a server from the pyspark wheel, clients that send plans.

The server (`SparkConnectServer` through spark-submit, 127.0.0.1, a free
port) runs the data source in its own Python workers, which import
spark_webdataset from this venv. Clients are separate processes with
SPARK_REMOTE set: one writes and reads back; the build job runs its
whole `main()` through the remote session; reshard's RDD step refuses
with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import SUPPORT
from tests.support.gcs_emulator import free_port
from tests.support.helpers import assert_version_consistent, manifest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("connect") / "server.log"
    command = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--class",
        CONNECT_SERVER,
        "--master",
        "local[2]",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.ui.enabled=false",
        "spark-internal",
    ]
    with open(log, "wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "Spark Connect server started" not in log.read_text(errors="replace"):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Spark Connect server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


def _client(url: str, *argv: str, code: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPARK_REMOTE=url)
    command = [sys.executable, "-c", code, *argv] if code else [sys.executable, *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)


def test_write_read_and_the_build_job_through_a_spark_connect_session(connect_url, digits_source, tmp_path) -> None:
    from spark_webdataset.dataset.validate import validate_version

    written = tmp_path / "written"
    client = _client(connect_url, str(SUPPORT / "connect_client.py"), str(written))
    assert client.returncode == 0, client.stderr[-3000:]
    result = json.loads(client.stdout.strip().splitlines()[-1])
    assert result["session"].startswith("pyspark.sql.connect")
    assert result["keys"] == [f"{i:05d}" for i in range(100)]
    assert result["one"] == [{"key": "00042", "url": str(written / "shard-000001.tar"), "txt": "sample 42"}]
    document = assert_version_consistent(written)
    assert document["samples"] == 100 and all(s["samples"] <= 30 for s in document["shards"])

    # the build job, end to end (argument parsing, session, build, summary) over the remote session
    root = tmp_path / "digits"
    job = "import sys; from spark_webdataset.jobs.build import main; sys.exit(main(sys.argv[1:]))"
    build = _client(
        connect_url,
        "--source",
        digits_source,
        "--output",
        str(root),
        "--version",
        "20261201T000000Z",
        "--key",
        "format_string('%05d', id)",
        "--field",
        "png=image",
        "--field",
        "cls=label",
        "--max-shard-bytes",
        "64KiB",
        code=job,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-3000:]
    assert "build_webdataset: wrote" in build.stdout
    version = root / "versions" / "20261201T000000Z"
    assert manifest(version)["samples"] == 1797  # every digit
    assert validate_version(str(version)).ok

    # what Spark Connect cannot do fails with a message that says so (exit 2: no retry helps)
    reshard = "import sys; from spark_webdataset.jobs.reshard import main; sys.exit(main(sys.argv[1:]))"
    refused = _client(
        connect_url,
        "--input",
        str(version),
        "--output",
        str(tmp_path / "resharded"),
        "--version",
        "v2",
        "--shard-multiple",
        "4",
        code=reshard,
    )
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-3000:]
    assert "Spark Connect does not offer" in refused.stderr + refused.stdout
