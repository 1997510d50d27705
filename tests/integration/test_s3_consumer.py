"""The example consumer on an s3:// dataset (the S3 server, moto): it reads through our Storage, never the aws CLI.

wids' own s3:// download runs `aws s3 cp` (absent on most training nodes, and it would need the
CLI's own endpoint settings); webdataset has no s3:// opener at all (users write
`pipe:aws s3 cp ...`). An `aws` that records its calls and fails stands first on PATH here, so any
use of it fails the test at once. Without Spark: shards from the real ShardWriter, uploaded through
our Storage, then the real validate_version and publish on the s3:// root.
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


@pytest.fixture
def no_aws_cli(tmp_path, monkeypatch) -> Path:
    """An `aws` (and `gsutil`) first on PATH that log their arguments and fail; wids' cache in the test's directory."""
    stub = tmp_path / "stub-bin"
    stub.mkdir()
    calls = tmp_path / "cli-calls"
    for name in ("aws", "gsutil"):
        (stub / name).write_text(f'#!/bin/sh\necho "{name} $@" >> {calls}\nexit 1\n')
        (stub / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{stub}:{BIN}:/usr/bin:/bin")
    monkeypatch.setenv("WIDS_CACHE", str(tmp_path / "wids-cache"))
    return calls


@pytest.fixture
def s3_root(s3_bucket, tmp_path) -> dict:
    """Two published versions of the first SAMPLES digits under s3://<bucket>/digits (64 KiB shards)."""
    root = f"{s3_bucket}/digits"
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
    return {"root": root, "extras": extras, "shards": shards}


def test_the_consumer_reads_an_s3_dataset_through_our_storage(s3_root, no_aws_cli, capsys) -> None:
    root, extras = s3_root["root"], s3_root["extras"]
    assert extras[VERSIONS[0]]["index"].startswith("s3://")
    assert read_published(extras[VERSIONS[0]]) == {"version": VERSIONS[0], "samples": SAMPLES}
    assert read_latest(root) == {"version": VERSIONS[-1], "samples": SAMPLES}
    out = capsys.readouterr().out
    assert f"version {VERSIONS[0]}: {SAMPLES} samples in {len(s3_root['shards'])} shards; first sample '00000'" in out
    # every sample of every shard: wids downloads each shard through our Storage
    dataset = wids_through_storage().ShardListDataset(extras[VERSIONS[0]]["index"], transformations=[])
    try:
        keys = [dataset[i]["__key__"] for i in range(len(dataset))]
    finally:
        dataset.close()
    assert keys == [f"{i:05d}" for i in range(SAMPLES)]
    assert not no_aws_cli.exists(), f"a CLI ran: {no_aws_cli.read_text()}"


def test_the_consumer_dags_tasks_read_s3_versions(s3_root, no_aws_cli) -> None:
    """consume_webdataset's own task bodies, on the events two s3:// publishes give (as Airflow hands them)."""
    from tests.support.dataset_dags import dagbag_of

    consumer = dagbag_of(REPO / "dags" / "consume_webdataset.py").dags["consume_webdataset"]
    events = [SimpleNamespace(extra=extra, timestamp=n) for n, extra in enumerate(s3_root["extras"].values())]
    triggering = {"webdataset_digits_s3": events}
    each = consumer.get_task("read_each_published_version").python_callable(triggering_asset_events=triggering)
    assert each == [{"version": version, "samples": SAMPLES} for version in VERSIONS]
    latest = consumer.get_task("read_latest_version").python_callable(triggering_asset_events=triggering)
    assert latest == [{"version": VERSIONS[-1], "samples": SAMPLES}]
    assert not no_aws_cli.exists(), f"a CLI ran: {no_aws_cli.read_text()}"


def test_webdataset_streams_s3_shards_in_process_and_through_cat(s3_root, no_aws_cli) -> None:
    """webdataset.WebDataset on s3:// URLs: in process (the opener wids_through_storage registers), and as
    `pipe:spark-webdataset cat s3://...` URLs."""
    import webdataset as wds

    version = Dataset(s3_root["root"]).version(VERSIONS[0])
    uris = [version.path(name) for name in s3_root["shards"]]
    wids_through_storage()
    expected = [f"{i:05d}" for i in range(SAMPLES)]
    assert [sample["__key__"] for sample in wds.WebDataset(uris, shardshuffle=False)] == expected
    piped = wds.WebDataset([f"pipe:spark-webdataset cat {uri}" for uri in uris], shardshuffle=False)
    assert [sample["__key__"] for sample in piped] == expected
    missing = subprocess.run(
        ["spark-webdataset", "cat", version.path("nope.tar")], capture_output=True, text=True, timeout=120
    )
    assert missing.returncode == 4 and "nope.tar: no such object" in missing.stderr
    assert not no_aws_cli.exists(), f"a CLI ran: {no_aws_cli.read_text()}"
