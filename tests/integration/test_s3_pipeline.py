"""s3:// on a real S3 API (moto server) with Spark: the data source writes, validation, racing
publishers, publish, and reads back through the data source and random access."""

from __future__ import annotations

import pytest

import spark_webdataset
from spark_webdataset.dataset.publish import publish, read_latest
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.format.manifest import Manifest
from spark_webdataset.storage import storage_for
from tests.support.helpers import crc32c_text, publish_race

pytestmark = pytest.mark.slow


def test_spark_write_validate_publish_and_read_back_on_s3(spark, s3_bucket, digits_source) -> None:
    root = f"{s3_bucket}/digits"
    version = f"{root}/versions/v1"
    frame = spark.read.parquet(digits_source).selectExpr(
        "format_string('%05d', id) AS __key__", "image AS png", "label AS cls"
    )
    frame.repartition(3).write.format("webdataset").option("maxShardBytes", "512KiB").mode("overwrite").save(version)
    storage = storage_for(root)
    manifest = Manifest.from_json(storage.read_bytes(f"{version}/_manifest.json"))
    assert manifest.samples == 1797 and len(manifest.shards) >= 3
    expected_names = ["_WEBDATASET", "_manifest.json", *(s.name for s in manifest.shards)]
    assert sorted(storage.list_sizes(version)) == sorted(expected_names)
    assert storage.list_dirs(version) == ["_index"]  # no staging left
    server_crcs = storage.crc32c_below(version)
    for shard in manifest.shards:
        assert crc32c_text(storage.read_bytes(f"{version}/{shard.name}")) == shard.crc32c == server_crcs[shard.name]

    report = validate_version(version, workers=2)
    assert report.ok, report.summary()
    assert sorted(publish_race(root, ["v1", "v1", "v1"])) == ["noop", "noop", "won"]
    assert storage.list_sizes(f"{root}/_published").keys() == {"v1.json"}
    assert publish(root, "v1").already_published and read_latest(root) == "v1"

    expected = {f"{r['id']:05d}": (bytes(r["image"]), r["label"]) for r in spark.read.parquet(digits_source).collect()}
    ours = spark.read.format("webdataset").schema("__key__ string, png binary, cls int").load(root)
    assert {r["__key__"]: (bytes(r["png"]), r["cls"]) for r in ours.collect()} == expected

    samples = spark_webdataset.open(root)
    assert len(samples) == 1797
    assert samples.get("00042")["png"] == expected["00042"][0]
    assert samples[1796]["__key__"] == "01796"


def test_a_second_write_into_a_published_s3_version_is_refused(spark, s3_bucket) -> None:
    root = f"{s3_bucket}/ds"
    version = f"{root}/versions/v1"
    frame = spark.createDataFrame([(f"{i:04d}", b"x" * i) for i in range(20)], "__key__ string, bin binary")
    frame.coalesce(1).write.format("webdataset").mode("overwrite").save(version)
    assert validate_version(version, workers=1).ok
    publish(root, "v1")
    before = storage_for(root).objects(version)
    with pytest.raises(Exception, match="(?i)published|sealed"):
        frame.coalesce(1).write.format("webdataset").mode("append").save(version)
    assert storage_for(root).objects(version) == before
