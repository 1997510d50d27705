"""gs:// on the emulator with Spark: Spark writes, validation, publish, racing publishers, and reads back.
The DAG run to gs://: tests/e2e/test_gcs_pipeline.py.
"""

from __future__ import annotations

import urllib.parse

import pytest

from spark_webdataset.dataset.publish import publish, read_latest
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.format.manifest import Manifest
from spark_webdataset.storage import storage_for
from tests.support.helpers import crc32c_text, publish_race

pytestmark = pytest.mark.slow


def http_url(emulator, uri: str) -> str:
    bucket, _, name = uri[len("gs://") :].partition("/")
    return f"{emulator.url}/download/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}?alt=media"


def test_spark_write_validate_publish_and_read_back(spark, bucket, gcs_emulator, digits_source, tmp_path) -> None:
    import webdataset as wds

    root = f"{bucket}/digits"
    version = f"{root}/versions/v1"
    frame = spark.read.parquet(digits_source).selectExpr(
        "format_string('%05d', id) AS __key__", "image AS png", "label AS cls"
    )
    frame.repartition(3).write.format("webdataset").option("maxShardBytes", "512KiB").mode("overwrite").save(version)
    storage = storage_for(root)
    manifest = Manifest.from_json(storage.read_bytes(f"{version}/_manifest.json"))
    assert manifest.samples == 1797 and len(manifest.shards) >= 3
    expected = ["_WEBDATASET", "_manifest.json", *(s.name for s in manifest.shards)]
    assert sorted(storage.list_sizes(version)) == sorted(expected)
    assert storage.list_dirs(version) == ["_index"]  # no staging left
    for shard in manifest.shards:
        assert crc32c_text(storage.read_bytes(f"{version}/{shard.name}")) == shard.crc32c

    report = validate_version(version, workers=2)
    assert report.ok, report.summary()
    # two publishers race on the version (separate processes): one record, one winner

    assert sorted(publish_race(root, ["v1", "v1", "v1"])) == ["noop", "noop", "won"]
    assert storage.list_sizes(f"{root}/_published").keys() == {"v1.json"}
    assert publish(root, "v1").already_published and read_latest(root) == "v1"

    expected = {r["id"]: r for r in frame.sparkSession.read.parquet(digits_source).collect()}
    urls = [http_url(gcs_emulator, f"{version}/{s.name}") for s in manifest.shards]
    through_http = {s["__key__"]: s["png"] for s in wds.WebDataset(urls, shardshuffle=False)}
    assert through_http == {f"{i:05d}": bytes(r["image"]) for i, r in expected.items()}
    ours = spark.read.format("webdataset").schema("__key__ string, png binary, cls int").load(root)
    assert {r["__key__"]: (bytes(r["png"]), r["cls"]) for r in ours.collect()} == {
        f"{i:05d}": (bytes(r["image"]), r["label"]) for i, r in expected.items()
    }
