"""The example consumer on a gs:// dataset (the emulator): it reads through our Storage, never gsutil.

wids' own gs:// download runs `gsutil cp`, which ignores STORAGE_EMULATOR_HOST (and, against real
GCS without credentials, hangs); a `gsutil` that records its calls and fails stands first on PATH
here, so any use of it fails the test at once. Without Spark: shards from the real ShardWriter,
uploaded through our Storage, then the real validate_version and publish on the gs:// root.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from spark_webdataset.airflow.consumer import read_latest, read_published, wids_for_gcs
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
def no_gsutil(tmp_path, monkeypatch) -> Path:
    """A `gsutil` first on PATH that logs its arguments and fails; wids' cache in the test's directory."""
    stub = tmp_path / "stub-bin"
    stub.mkdir()
    calls = tmp_path / "gsutil-calls"
    (stub / "gsutil").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 1\n')
    (stub / "gsutil").chmod(0o755)
    monkeypatch.setenv("PATH", f"{stub}:{BIN}:/usr/bin:/bin")
    monkeypatch.setenv("WIDS_CACHE", str(tmp_path / "wids-cache"))
    return calls


@pytest.fixture
def gcs_root(bucket, tmp_path) -> dict:
    """Two published versions of the first SAMPLES digits under gs://<bucket>/digits (64 KiB shards)."""
    root = f"{bucket}/digits"
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


def test_the_consumer_reads_a_gs_dataset_through_our_storage(gcs_root, no_gsutil, capsys) -> None:
    root, extras = gcs_root["root"], gcs_root["extras"]
    assert extras[VERSIONS[0]]["index"].startswith("gs://")
    assert read_published(extras[VERSIONS[0]]) == {"version": VERSIONS[0], "samples": SAMPLES}
    assert read_latest(root) == {"version": VERSIONS[-1], "samples": SAMPLES}
    out = capsys.readouterr().out
    assert f"version {VERSIONS[0]}: {SAMPLES} samples in {len(gcs_root['shards'])} shards; first sample '00000'" in out
    # every sample of every shard, not only the index's counts: wids downloads each shard through our Storage
    wids = wids_for_gcs()
    dataset = wids.ShardListDataset(extras[VERSIONS[0]]["index"], transformations=[])
    try:
        keys = [dataset[i]["__key__"] for i in range(len(dataset))]
    finally:
        dataset.close()
    assert keys == [f"{i:05d}" for i in range(SAMPLES)]
    assert not no_gsutil.exists(), f"gsutil ran: {no_gsutil.read_text()}"


def test_the_consumer_dags_tasks_read_gs_versions(gcs_root, no_gsutil) -> None:
    """consume_webdataset's own task bodies, on the events two gs:// publishes give (as Airflow hands them)."""
    from tests.support.dataset_dags import dagbag_of

    consumer = dagbag_of(REPO / "dags" / "consume_webdataset.py").dags["consume_webdataset"]
    events = [SimpleNamespace(extra=extra, timestamp=n) for n, extra in enumerate(gcs_root["extras"].values())]
    triggering = {"webdataset_digits_gcs": events}
    each = consumer.get_task("read_each_published_version").python_callable(triggering_asset_events=triggering)
    assert each == [{"version": version, "samples": SAMPLES} for version in VERSIONS]
    latest = consumer.get_task("read_latest_version").python_callable(triggering_asset_events=triggering)
    assert latest == [{"version": VERSIONS[-1], "samples": SAMPLES}]
    assert not no_gsutil.exists(), f"gsutil ran: {no_gsutil.read_text()}"


def test_cat_streams_a_gs_shard_for_webdataset_pipe_urls(gcs_root, no_gsutil) -> None:
    import webdataset as wds

    version = Dataset(gcs_root["root"]).version(VERSIONS[0])
    uris = [version.path(name) for name in gcs_root["shards"]]
    storage = storage_for(uris[0])
    cat = subprocess.run(["spark-webdataset", "cat", uris[0]], capture_output=True, timeout=120)
    assert cat.returncode == 0, cat.stderr.decode()
    assert cat.stdout == storage.read_bytes(uris[0])
    streamed = wds.WebDataset([f"pipe:spark-webdataset cat {uri}" for uri in uris], shardshuffle=False)
    assert [sample["__key__"] for sample in streamed] == [f"{i:05d}" for i in range(SAMPLES)]
    # a reader that stops early (closes the pipe; more is left than the pipe holds): exit 141, which webdataset ignores, and no traceback
    assert sum(storage_for(uri).list_sizes(version.uri)[uri.rsplit("/", 1)[1]] for uri in uris) > 128 * 1024
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
    assert not no_gsutil.exists(), f"gsutil ran: {no_gsutil.read_text()}"
