"""`spark.read.format("webdataset")`: exact round trips, foreign shards, bad shards, pruning."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from spark_webdataset.spark.options import ReadOptions
from spark_webdataset.spark.reader import ShardPartition, WebDatasetReader

pytestmark = pytest.mark.slow

ALL_TYPES = """
    __key__ string, s string, b binary, i int, l bigint, h smallint, t tinyint, f float, d double,
    m decimal(10,3), flag boolean, day date, at timestamp, local timestamp_ntz,
    ints array<int>, attrs map<string,int>, meta struct<name:string,score:double,tags:array<string>>
"""


def all_types_frame(spark):
    return spark.sql(
        """SELECT format_string('k%04d', id) AS __key__,
                  CASE WHEN id % 5 = 0 THEN NULL ELSE concat('text ', id, ' ü') END AS s,
                  unhex(sha2(CAST(id AS STRING), 256)) AS b,
                  CAST(id AS INT) - 50 AS i, id * 1000000007 AS l, CAST(id % 300 AS SMALLINT) AS h,
                  CAST(id % 100 AS TINYINT) AS t, CAST(id / 7.0 AS FLOAT) AS f, id / 3.0D AS d,
                  CAST(id / 8.0 AS DECIMAL(10,3)) AS m, id % 2 = 0 AS flag,
                  date_add(DATE'2024-01-01', CAST(id AS INT)) AS day,
                  TIMESTAMP'2024-03-01 10:00:00.123456' + make_interval(0, 0, 0, 0, 0, 0, id) AS at,
                  TIMESTAMP_NTZ'2024-03-01 10:00:00' + make_interval(0, 0, 0, CAST(id AS INT)) AS local,
                  array(CAST(id AS INT), 2) AS ints, map('a', CAST(id AS INT)) AS attrs,
                  named_struct('name', concat('n', id), 'score', id * 0.5D, 'tags', array('x', 'y')) AS meta
           FROM range(200)"""
    )


def test_round_trip_is_exact_for_every_type(spark, tmp_path) -> None:
    original = all_types_frame(spark)
    target = str(tmp_path / "v")
    original.repartition(3).write.format("webdataset").option("maxShardBytes", "256KiB").mode("overwrite").save(target)
    back = spark.read.format("webdataset").schema(ALL_TYPES).load(target).cache()  # one read task per shard, once
    assert back.rdd.getNumPartitions() == len(list(Path(target).glob("shard-*.tar"))) > 3
    assert back.count() == 200
    # set operations refuse maps: compare them as their sorted entries
    original, back = (f.withColumn("attrs", F.map_entries("attrs")) for f in (original, back))
    assert original.exceptAll(back).count() == 0
    assert back.exceptAll(original).count() == 0


def test_default_schema_is_binary_fields_with_url(spark, tmp_path) -> None:
    target = str(tmp_path / "v")
    all_types_frame(spark).limit(5).write.format("webdataset").mode("overwrite").save(target)
    frame = spark.read.format("webdataset").load(target)
    assert frame.columns[:2] == ["__key__", "__url__"]
    assert {f.dataType.simpleString() for f in frame.schema.fields[2:]} == {"binary"}
    row = frame.where("__key__ = 'k0001'").first()
    assert row["i"] == b"-49" and row["__url__"].endswith("shard-000000.tar")


def test_dataset_root_reads_latest_and_patterns_expand(spark, tmp_path) -> None:
    root = tmp_path / "root"
    for version, count in (("v1", 10), ("v2", 30)):
        spark.range(count).selectExpr("format_string('k%03d', id) AS __key__", "id AS cls").coalesce(1).write.format(
            "webdataset"
        ).option("maxSamplesPerShard", 10).mode("overwrite").save(str(root / "versions" / version))
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.dataset.validate import validate_version

    for version in ("v1", "v2"):
        assert validate_version(str(root / "versions" / version)).ok
        publish(str(root), version)
    assert (root / "LATEST").read_text() == "v2\n"
    assert spark.read.format("webdataset").load(str(root)).count() == 30
    pattern = str(root / "versions" / "v2" / "shard-{000000..000001}.tar")
    assert spark.read.format("webdataset").load(pattern).count() == 20
    glob = str(root / "versions" / "v2" / "shard-00000[02].tar")
    assert spark.read.format("webdataset").load(glob).count() == 20


def test_reads_shards_from_webdataset_shardwriter_with_differing_fields(spark, tmp_path) -> None:
    import webdataset as wds

    pattern = str(tmp_path / "foreign-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=4) as sink:
        for i in range(10):
            sample = {"__key__": f"img{i:03d}", "txt": f"caption {i}"}
            if i % 2 == 0:
                sample["cls"] = str(i)
            sink.write(sample)
    frame = spark.read.format("webdataset").schema("__key__ string, txt string, cls int").load(
        str(tmp_path / "foreign-*.tar")
    )
    rows = {r["__key__"]: (r["txt"], r["cls"]) for r in frame.collect()}
    assert rows["img000"] == ("caption 0", 0) and rows["img001"] == ("caption 1", None)
    assert len(rows) == 10


def test_reads_a_gnu_tar_of_a_directory(spark, tmp_path) -> None:
    files = tmp_path / "files"
    (files / "a").mkdir(parents=True)
    for name, data in {"a/one.txt": "1", "a/one.json": "{}", "a/two.txt": "2"}.items():
        (files / name).write_text(data)
    shard = tmp_path / "gnu.tar"
    subprocess.run(["tar", "-cf", str(shard), "--sort=name", "-C", str(files), "a"], check=True)
    frame = spark.read.format("webdataset").schema("__key__ string, txt string, json string").load(str(shard))
    # GNU tar adds a directory member "a/": not a <key>.<field> name
    with pytest.raises(Exception, match=r"gnu.tar: offset 0.*not a regular file"):
        frame.collect()
    subprocess.run(["tar", "-cf", str(shard), "--sort=name", "-C", str(files), "a/one.json", "a/one.txt", "a/two.txt"], check=True)
    rows = sorted(tuple(r) for r in spark.read.format("webdataset").schema("__key__ string, txt string, json string").load(str(shard)).collect())
    assert rows == [("a/one", "1", "{}"), ("a/two", "2", None)]


def test_bad_shard_fails_with_name_and_offset_or_is_skipped_and_counted(spark, tmp_path) -> None:
    target = tmp_path / "v"
    spark.range(30).selectExpr("format_string('k%03d', id) AS __key__", "repeat('x', 600) AS txt").coalesce(1).write.format(
        "webdataset"
    ).option("maxSamplesPerShard", 10).mode("overwrite").save(str(target))
    bad = target / "shard-000001.tar"
    bad.write_bytes(bad.read_bytes()[:3000])
    with pytest.raises(Exception, match=r"shard-000001.tar: offset 1536: member 'k011.txt' is truncated"):
        spark.read.format("webdataset").load(str(target)).collect()
    counted = tmp_path / "bad"
    frame = (
        spark.read.format("webdataset")
        .option("skipBadShards", "true")
        .option("badShardsDir", str(counted))
        .load(str(target))
    )
    assert frame.count() == 20
    [record] = [json.loads(p.read_text()) for p in counted.glob("*.json")]
    assert record["shard"].endswith("shard-000001.tar") and "offset 1536" in record["error"]


class CountingStream(io.BufferedReader):
    """Adds every byte read through it, by any read method, to its own test's `counted` list."""

    def __init__(self, raw, counted: list[int]) -> None:
        super().__init__(raw)
        self.counted = counted

    def read(self, size=-1):
        data = super().read(size)
        self.counted.append(len(data))
        return data

    def read1(self, size=-1):
        data = super().read1(size)
        self.counted.append(len(data))
        return data

    def readinto(self, buffer):
        count = super().readinto(buffer)
        self.counted.append(count or 0)
        return count

    def readinto1(self, buffer):
        count = super().readinto1(buffer)
        self.counted.append(count or 0)
        return count


def test_key_only_schema_reads_no_payload(tmp_path, monkeypatch) -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_webdataset.format.encode import encode_column
    from spark_webdataset.format.shard_writer import ShardWriter
    import pyarrow as pa

    path = tmp_path / "shard.tar"
    writer = ShardWriter(["bin"], lambda _: open(path, "wb"), max_shard_bytes=1 << 30)
    writer.write_batch(pa.array([f"k{i}" for i in range(200)]), [encode_column(pa.array([b"z" * 100_000] * 200), "bin")])
    writer.close()
    from spark_webdataset.storage.local import LocalStorage

    counted: list[int] = []  # this test's own count: nothing carried over from another test or run
    monkeypatch.setattr(LocalStorage, "open_read", lambda self, p: CountingStream(io.FileIO(p), counted))
    schema = StructType([StructField("__key__", StringType())])
    reader = WebDatasetReader(ReadOptions(str(path)), schema)
    keys = [key for batch in reader.read(ShardPartition(str(path), 0)) for key in batch.column(0).to_pylist()]
    assert keys == [f"k{i}" for i in range(200)]
    # every header was read through the stream, payloads were seeked over
    assert 200 * 512 <= sum(counted) < 200 * 512 * 2, sum(counted)
    assert path.stat().st_size > 200 * 100_000
