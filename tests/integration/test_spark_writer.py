"""`df.write.format("webdataset")` with real Spark, read back by webdataset, wids and GNU tar."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from spark_webdataset.errors import (
    FieldMismatch,
    from_spark,
)
from tests.support.helpers import TEXT_MTIME, assert_version_consistent, manifest, shard_paths, text_v1

pytestmark = pytest.mark.slow
CAP = 256 * 1024


def digits_frame(spark, source: str):
    return spark.read.parquet(source).selectExpr(
        "format_string('digits/%05d', id) AS __key__", "image AS png", "label AS cls", "meta AS json"
    )


def expected_digits(source: str) -> dict[str, dict[str, bytes]]:
    """What each sample must hold, computed from the parquet without our encoder."""
    table = pq.read_table(source)
    expected = {}
    for row in table.to_pylist():
        expected[f"digits/{row['id']:05d}"] = {
            "png": row["image"],
            "cls": str(row["label"]).encode(),
            "json": json.dumps(row["meta"], separators=(",", ":")).encode(),
        }
    return expected


@pytest.fixture(scope="module")
def digits_version(spark, digits_source, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("written") / "v1"
    (
        digits_frame(spark, digits_source)
        .repartition(3)
        .write.format("webdataset")
        .option("maxShardBytes", CAP)
        .mode("overwrite")
        .save(str(target))
    )
    return target


def test_webdataset_library_reads_every_sample_byte_for_byte(digits_version, digits_source) -> None:
    import webdataset as wds

    expected = expected_digits(digits_source)
    urls = [str(p) for p in shard_paths(digits_version)]
    seen = {}
    for sample in wds.WebDataset(urls, shardshuffle=False):
        fields = {k: v for k, v in sample.items() if not k.startswith("__")}
        assert sample["__key__"] not in seen
        seen[sample["__key__"]] = fields
    assert seen == expected


def test_wids_reads_through_a_shard_index(digits_version, digits_source, tmp_path) -> None:
    import wids

    document = manifest(digits_version)
    index = {
        "__kind__": "wids-shard-index-v1",
        "wids_version": 1,
        "shardlist": [{"url": s["name"], "nsamples": s["samples"], "filesize": s["bytes"]} for s in document["shards"]],
    }
    # the index beside its shards (urls are relative to it), in this test's own copy: the module's
    # version directory stays as the writer left it
    own = tmp_path / "v1"
    shutil.copytree(digits_version, own)
    index_path = own / "test-shardindex.json"
    index_path.write_text(json.dumps(index))
    dataset = wids.ShardListDataset(str(index_path), transformations=[], cache_dir=str(tmp_path / "cache"))
    expected = expected_digits(digits_source)
    assert len(dataset) == len(expected)
    for index in (0, len(dataset) // 2, len(dataset) - 1):
        sample = dataset[index]
        key = sample["__key__"]
        assert {ext: sample["." + ext].read() for ext in ("png", "cls", "json")} == expected[key]


def test_gnu_tar_lists_the_members(digits_version) -> None:
    listing = subprocess.run(
        ["tar", "-tvf", str(shard_paths(digits_version)[0])], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert listing and all(line.startswith("-r--r--r-- 0/0") for line in listing)
    names = [line.split()[-1] for line in listing]
    assert names[:3] == [names[0].rsplit(".", 1)[0] + ext for ext in (".png", ".cls", ".json")]


def test_manifest_matches_files_and_caps(digits_version, digits_source) -> None:
    document = assert_version_consistent(digits_version, CAP)
    assert document["samples"] == 1797
    assert len(document["shards"]) > 3
    assert [f["name"] for f in document["fields"]] == ["png", "cls", "json"]
    assert document["fields"][1]["type"] == "bigint"
    assert document["run"]["spark_application_id"].startswith("local-")


def test_overwrite_replaces_and_append_extends(spark, tmp_path) -> None:
    target = str(tmp_path / "v")
    frame = spark.range(0, 40).selectExpr("format_string('a%03d', id) AS __key__", "id AS cls").coalesce(1)
    frame.write.format("webdataset").option("maxSamplesPerShard", 10).mode("overwrite").save(target)
    assert len(shard_paths(target)) == 4
    frame.limit(5).write.format("webdataset").mode("overwrite").save(target)
    assert len(shard_paths(target)) == 1 and manifest(target)["samples"] == 5
    more = spark.range(100, 130).selectExpr("format_string('a%03d', id) AS __key__", "id AS cls").coalesce(1)
    more.write.format("webdataset").option("maxSamplesPerShard", 10).mode("append").save(target)
    document = assert_version_consistent(target)
    assert document["samples"] == 35 and len(document["shards"]) == 4
    assert document["shards"][0]["first_key"] == "a000"


def test_value_encoding_by_type(spark, tmp_path) -> None:
    import webdataset as wds

    target = str(tmp_path / "types")
    spark.sql(
        """SELECT 'k1' AS __key__, 'héllo' AS txt, 7 AS cls, 2.5D AS score, true AS flag,
                  DATE'2024-02-29' AS day, TIMESTAMP'2024-01-02 03:04:05.5' AS at,
                  array(1, 2) AS list, map('a', 1) AS dict, CAST(NULL AS STRING) AS gone,
                  CAST(12.50 AS DECIMAL(6,2)) AS price"""
    ).write.format("webdataset").mode("overwrite").save(target)
    [sample] = list(wds.WebDataset(target + "/shard-000000.tar", shardshuffle=False))
    assert sample["txt"] == "héllo".encode()
    assert (sample["cls"], sample["score"], sample["flag"]) == (b"7", b"2.5", b"1")
    assert sample["day"] == b"2024-02-29"
    assert sample["at"] == b"2024-01-02T03:04:05.500000Z"
    assert (sample["list"], sample["dict"], sample["price"]) == (b"[1,2]", b'{"a":1}', b"12.50")
    assert "gone" not in sample


# -- append: field mismatch, and the build job's --mode append -----------------------------------


@pytest.mark.slow
def test_append_with_other_fields_is_a_field_mismatch_and_changes_nothing(spark, text_root_copy) -> None:
    target = text_v1(text_root_copy)
    before = {p.name: p.read_bytes() for p in target.iterdir() if p.is_file()}
    extra = spark.range(5).selectExpr("format_string('x%03d', id) AS __key__", "'t' AS txt", "'{}' AS json")
    with pytest.raises(Exception) as caught:
        extra.write.format("webdataset").mode("append").save(str(target))
    typed = from_spark(caught.value)
    assert isinstance(typed, FieldMismatch), caught.value
    assert "json" in str(typed) and "cls" in str(typed)
    assert {p.name: p.read_bytes() for p in target.iterdir() if p.is_file()} == before
    assert not (target / "_staging").exists() or not any((target / "_staging").iterdir())


# -- a non-default mtime -------------------------------------------------------------------------


@pytest.mark.slow
def test_every_member_carries_the_mtime_option(text_root) -> None:
    members = 0
    for path in shard_paths(text_v1(text_root)):
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                assert member.mtime == TEXT_MTIME, (path.name, member.name, member.mtime)
                members += 1
    assert members == 120 + 120 - 17  # cls everywhere, txt where not null
    assert manifest(text_v1(text_root))["options"]["mtime"] == TEXT_MTIME
