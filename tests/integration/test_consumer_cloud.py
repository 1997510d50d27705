"""The example consumer on a gs:// dataset (the emulator) and an s3:// one (the S3 server): it reads
through our Storage, never a cloud CLI.

wids' own downloads run `gsutil cp` (which ignores STORAGE_EMULATOR_HOST and, against real GCS
without credentials, hangs) and `aws s3 cp` (absent on most training nodes, with its own endpoint
settings); webdataset has no s3:// opener at all. A `gsutil` and an `aws` that record their calls and
fail stand first on PATH here, so any use of them fails the test at once. Without Spark: shards from
the real ShardWriter, uploaded through our Storage, then the real validate_version and publish.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from spark_webdataset.airflow.consumer import read_latest, read_published, wids_through_storage
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.storage import storage_for
from tests.support import REPO
from tests.support.webdataset_ui_data import commit_table, digits_table

BIN = Path(sys.executable).parent
SAMPLES = 600
VERSIONS = ("20261201T000000Z", "20261202T000000Z")
BUCKETS = {"gs": "bucket", "s3": "s3_bucket"}  # the fixture that gives each store a fresh bucket
ASSETS = {"gs": "webdataset_digits_gcs", "s3": "webdataset_digits_s3"}


@pytest.fixture
def no_cloud_cli(tmp_path, monkeypatch) -> Path:
    """A `gsutil` and an `aws` first on PATH that log their arguments and fail; wids' cache in the test's directory."""
    stub = tmp_path / "stub-bin"
    stub.mkdir()
    calls = tmp_path / "cli-calls"
    for name in ("gsutil", "aws"):
        (stub / name).write_text(f'#!/bin/sh\necho "{name} $@" >> {calls}\nexit 1\n')
        (stub / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{stub}:{BIN}:/usr/bin:/bin")
    monkeypatch.setenv("WIDS_CACHE", str(tmp_path / "wids-cache"))
    return calls


@pytest.fixture(params=sorted(BUCKETS))
def cloud_root(request, tmp_path) -> dict:
    """Two published versions of the first SAMPLES digits under <bucket>/digits (64 KiB shards)."""
    scheme = request.param
    root = f"{request.getfixturevalue(BUCKETS[scheme])}/digits"
    storage = storage_for(root)
    table = digits_table().slice(0, SAMPLES)
    extras = {}
    for version in VERSIONS:
        local = commit_table(tmp_path / "local", version, table, max_shard_bytes=64 * 1024)
        target = Dataset(root).version(version)
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            with storage.open_write(target.path(str(path.relative_to(local)))) as out:
                out.write(path.read_bytes())
        report = validate_version(target.uri, workers=1)
        assert report.ok, report.summary()
        result = publish(root, version)
        extras[version] = {"version": version, "root": root, "uri": target.uri, "index": result.index_uri}
    assert Dataset(root).read_latest() == VERSIONS[-1]
    shards = sorted(
        name for name in storage.list_sizes(Dataset(root).version(VERSIONS[0]).uri) if name.endswith(".tar")
    )
    assert len(shards) >= 3
    return {"scheme": scheme, "root": root, "extras": extras, "shards": shards}


def test_the_consumer_reads_a_cloud_dataset_through_our_storage(cloud_root, no_cloud_cli, capsys) -> None:
    root, extras = cloud_root["root"], cloud_root["extras"]
    assert extras[VERSIONS[0]]["index"].startswith(f"{cloud_root['scheme']}://")
    assert read_published(extras[VERSIONS[0]]) == {"version": VERSIONS[0], "samples": SAMPLES}
    assert read_latest(root) == {"version": VERSIONS[-1], "samples": SAMPLES}
    out = capsys.readouterr().out
    assert (
        f"version {VERSIONS[0]}: {SAMPLES} samples in {len(cloud_root['shards'])} shards; first sample '00000'" in out
    )
    # every sample of every shard, not only the index's counts: wids downloads each shard through our Storage
    dataset = wids_through_storage().ShardListDataset(extras[VERSIONS[0]]["index"], transformations=[])
    try:
        keys = [dataset[i]["__key__"] for i in range(len(dataset))]
    finally:
        dataset.close()
    assert keys == [f"{i:05d}" for i in range(SAMPLES)]
    assert not no_cloud_cli.exists(), f"a CLI ran: {no_cloud_cli.read_text()}"


def test_the_consumer_dags_tasks_read_cloud_versions(cloud_root, no_cloud_cli) -> None:
    """consume_webdataset's own task bodies, on the events two publishes give (as Airflow hands them)."""
    from tests.support.dataset_dags import dagbag_of

    consumer = dagbag_of(REPO / "dags" / "consume_webdataset.py").dags["consume_webdataset"]
    events = [SimpleNamespace(extra=extra, timestamp=n) for n, extra in enumerate(cloud_root["extras"].values())]
    triggering = {ASSETS[cloud_root["scheme"]]: events}
    each = consumer.get_task("read_each_published_version").python_callable(triggering_asset_events=triggering)
    assert each == [{"version": version, "samples": SAMPLES} for version in VERSIONS]
    latest = consumer.get_task("read_latest_version").python_callable(triggering_asset_events=triggering)
    assert latest == [{"version": VERSIONS[-1], "samples": SAMPLES}]
    assert not no_cloud_cli.exists(), f"a CLI ran: {no_cloud_cli.read_text()}"


def test_webdataset_streams_cloud_shards_in_process_and_through_cat(cloud_root, no_cloud_cli) -> None:
    """webdataset.WebDataset on the shards' URLs: in process (the opener wids_through_storage
    registers), and as `pipe:spark-webdataset cat URI` URLs; cat's exit codes on a closed pipe and a
    missing object."""
    import webdataset as wds

    version = Dataset(cloud_root["root"]).version(VERSIONS[0])
    uris = [version.path(name) for name in cloud_root["shards"]]
    storage = storage_for(uris[0])
    expected = [f"{i:05d}" for i in range(SAMPLES)]
    wids_through_storage()
    assert [sample["__key__"] for sample in wds.WebDataset(uris, shardshuffle=False)] == expected
    cat = subprocess.run(["spark-webdataset", "cat", uris[0]], capture_output=True, timeout=120)
    assert cat.returncode == 0, cat.stderr.decode()
    assert cat.stdout == storage.read_bytes(uris[0])
    piped = wds.WebDataset([f"pipe:spark-webdataset cat {uri}" for uri in uris], shardshuffle=False)
    assert [sample["__key__"] for sample in piped] == expected
    # a reader that stops early (closes the pipe; more is left than the pipe holds): exit 141, which webdataset ignores, and no traceback
    assert sum(storage.list_sizes(version.uri)[uri.rsplit("/", 1)[1]] for uri in uris) > 128 * 1024
    reader = subprocess.Popen(["spark-webdataset", "cat", *uris], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert len(reader.stdout.read(512)) == 512
    reader.stdout.close()
    assert reader.wait(timeout=120) == 141
    assert reader.stderr.read() == b""
    reader.stderr.close()
    # a missing object: exit 4 (storage: docs/cli.md's table) naming it
    missing = subprocess.run(
        ["spark-webdataset", "cat", version.path("nope.tar")], capture_output=True, text=True, timeout=120
    )
    assert missing.returncode == 4 and "nope.tar: no such object" in missing.stderr
    assert not no_cloud_cli.exists(), f"a CLI ran: {no_cloud_cli.read_text()}"
