"""`writeStream.format("webdataset")` into an s3:// version (moto server), checkpoint on local disk:
each micro-batch committed exactly once, a replayed batch commits nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import spark_webdataset
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.format.manifest import Manifest
from spark_webdataset.storage import storage_for
from tests.support.helpers import crc32c_text
from tests.support.streaming_driver import stream

pytestmark = pytest.mark.slow


def _add_file(source: Path, name: str, keys: list[str]) -> None:
    """Written aside and renamed in: the file source never sees half a file."""
    temp = source.parent / f".{name}.tmp"
    with open(temp, "w") as out:
        for key in keys:
            out.write(json.dumps({"__key__": key, "txt": f"row {key}", "cls": int(key) % 7}) + "\n")
    os.replace(temp, source / name)


def _keys(start: int, count: int) -> list[str]:
    return [f"{i:06d}" for i in range(start, start + count)]


def _run(spark, source: Path, version: str, checkpoint: Path) -> None:
    options = {"maxSamplesPerShard": "20"}
    stream(spark, str(source), version, str(checkpoint), options, available_now=True).awaitTermination()


def _manifest(version: str) -> Manifest:
    return Manifest.from_json(storage_for(version).read_bytes(f"{version}/_manifest.json"))


def _document(version: str) -> dict:
    return json.loads(storage_for(version).read_bytes(f"{version}/_manifest.json"))


def _shards(storage, version: str) -> dict:
    return {name: stored for name, stored in storage.objects(version).items() if name.startswith("shard-")}


def _rows(spark, version: str) -> dict[str, tuple[str, int]]:
    frame = spark.read.format("webdataset").schema("__key__ string, txt string, cls long").load(version)
    rows = frame.collect()
    assert len(rows) == len({r["__key__"] for r in rows}), "a sample read twice"
    return {r["__key__"]: (r["txt"], r["cls"]) for r in rows}


def _expected(count: int) -> dict[str, tuple[str, int]]:
    return {key: (f"row {key}", int(key) % 7) for key in _keys(0, count)}


def test_a_stream_into_s3_commits_each_batch_exactly_once(spark, s3_bucket, tmp_path) -> None:
    version = f"{s3_bucket}/stream/versions/v1"
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    _add_file(source, "0.json", _keys(0, 50))
    _add_file(source, "1.json", _keys(50, 30))
    _run(spark, source, version, checkpoint)
    assert _document(version)["run"]["streams"] == {str(checkpoint): 1}  # batches 0 and 1
    _add_file(source, "2.json", _keys(80, 25))
    _run(spark, source, version, checkpoint)

    storage = storage_for(version)
    committed = _document(version)
    assert committed["run"]["streams"] == {str(checkpoint): 2}
    shards = _manifest(version).shards
    assert [s.name for s in shards] == [f"shard-{i:06d}.tar" for i in range(len(shards))]
    assert sum(s.samples for s in shards) == 105
    server_crcs = storage.crc32c_below(version)
    for shard in shards:
        assert crc32c_text(storage.read_bytes(f"{version}/{shard.name}")) == shard.crc32c == server_crcs[shard.name]
    assert _rows(spark, version) == _expected(105)
    samples = spark_webdataset.open(version)
    assert len(samples) == 105 and samples.get("000104")["txt"] == b"row 000104"

    # Spark replays a batch whose commit it did not checkpoint: drop the record of batch 2
    for record in ("2", ".2.crc"):
        (checkpoint / "commits" / record).unlink()
    before = _shards(storage, version)
    _run(spark, source, version, checkpoint)
    assert (checkpoint / "commits" / "2").exists()  # Spark ran batch 2 again ...
    assert _document(version)["shards"] == committed["shards"]  # ... and it committed nothing
    assert _shards(storage, version) == before  # same shards, same identities (ETags) and crc32c
    assert _rows(spark, version) == _expected(105)
    report = validate_version(version, workers=1)
    assert report.ok, report.summary()
