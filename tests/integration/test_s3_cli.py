"""The CLI on s3:// (a real S3 API: moto in server mode), each command in a process of its own that
finds the server through AWS_ENDPOINT_URL: validate, publish, latest, inspect, pin, gc, get, cat."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile

from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.storage import storage_for
from tests.support.fenced_committer import commit_samples
from tests.support.helpers import run_cli


def test_validate_publish_latest_inspect_pin_gc_get_and_cat_on_s3(s3_bucket) -> None:
    root = f"{s3_bucket}/ds"
    for version, prefix in ((f"2026120{n}T000000Z", f"v{n}-") for n in (1, 2, 3)):
        uri = Dataset(root).version(version).uri
        commit_samples(uri, prefix, 12)
        done = run_cli("validate", uri, "--workers", "1", "--quiet")
        assert done.returncode == 0, done.stderr
        done = run_cli("publish", root, version)
        assert done.returncode == 0, done.stderr
    latest = run_cli("latest", root)
    assert latest.returncode == 0 and "20261203T000000Z" in latest.stdout, latest.stderr
    inspected = run_cli("inspect", root, "--json")
    assert inspected.returncode == 0, inspected.stderr
    assert len(json.loads(inspected.stdout)["versions"]) == 3

    sample = run_cli("get", root, "v3-00004", "--field", "txt")
    assert sample.returncode == 0 and sample.stdout == "text of v3-00004", sample.stderr

    version = Dataset(root).version("20261203T000000Z")
    shard = version.read_manifest().shards[0]
    streamed = subprocess.run([sys.executable, "-m", "spark_webdataset.cli", "cat", version.path(shard.name)],
                              capture_output=True, timeout=120)  # fmt: skip
    assert streamed.returncode == 0, streamed.stderr
    assert len(streamed.stdout) == shard.bytes
    with tarfile.open(fileobj=io.BytesIO(streamed.stdout)) as tar:
        assert tar.getnames()[0].startswith("v3-")

    assert run_cli("pin", root, "20261201T000000Z", "--reason", "eval set").returncode == 0
    gone = run_cli("gc", root, "--keep-last", "1", "--min-age", "0s", "--json")
    assert gone.returncode == 0, gone.stderr
    remaining = set(storage_for(root).list_dirs(f"{root}/versions"))
    assert remaining == {"20261201T000000Z", "20261203T000000Z"}, (remaining, gone.stdout)
