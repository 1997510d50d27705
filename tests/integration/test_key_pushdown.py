"""Key-range reads: a key-sorted version opens only the shards whose key range can match.

The range comes from reader options (keyMin, keyMax, keyPrefix), not from
pushed `where()` filters: pyspark 4.2 reuses the partitions planned for
one query's pushed filters in the DataFrame's next query that pushes none
(`PythonScanBuilder` caches them on the source), which silently dropped
rows; the regression test below is that sequence.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_webdataset.spark.options import ReadOptions
from spark_webdataset.spark.reader import WebDatasetReader


def write(spark, target: Path, sorted_by_key: bool) -> dict:
    # four partitions of 50 ids each, in order: keys ascend in every task, as with --order key
    frame = spark.range(0, 200, 1, 4).selectExpr("format_string('k%04d', id) AS __key__", "id % 10 AS cls")
    if not sorted_by_key:
        frame = frame.sortWithinPartitions("cls", "__key__")
    frame.write.format("webdataset").option("maxSamplesPerShard", 25).mode("overwrite").save(str(target))
    return json.loads((target / "_manifest.json").read_text())


@pytest.fixture(scope="module")
def sorted_version(spark, tmp_path_factory) -> tuple[Path, dict]:
    target = tmp_path_factory.mktemp("keys") / "sorted"
    return target, write(spark, target, sorted_by_key=True)


def _range(spark, target: Path, **options: str):
    return spark.read.format("webdataset").schema("__key__ string, cls int").options(**options).load(str(target))


@pytest.mark.slow
def test_key_options_open_only_matching_shards_and_return_exactly_the_range(spark, sorted_version) -> None:
    target, document = sorted_version
    assert len(document["shards"]) == 8 and all(s["keys_ascending"] for s in document["shards"])
    every = _range(spark, target).collect()  # the whole version, once, to compare the ranges with
    cases = {  # options: (shards to open, the same range in Python)
        ("k0042", "k0042", None): (1, lambda k: k == "k0042"),
        ("k0180", None, None): (1, lambda k: k >= "k0180"),
        (None, "k0039", None): (2, lambda k: k < "k0040"),
        (None, None, "k019"): (1, lambda k: k.startswith("k019")),
        ("k0174", "k0175", None): (2, lambda k: "k0174" <= k <= "k0175"),  # shards 6 and 7
        ("nope", None, None): (0, lambda k: False),  # no shard: Spark runs one empty partition instead
    }
    for (low, high, prefix), (shards, predicate) in cases.items():
        options = {name: value for name, value in (("keyMin", low), ("keyMax", high), ("keyPrefix", prefix)) if value}
        frame = _range(spark, target, **options)
        assert frame.rdd.getNumPartitions() == max(shards, 1), options
        assert sorted(frame.collect()) == sorted(r for r in every if predicate(r["__key__"])), options
        reader = WebDatasetReader(ReadOptions.parse({"path": str(target), **options}), frame.schema)
        assert len(reader.partitions()) == shards, options


@pytest.mark.slow
def test_a_filtered_query_leaves_the_next_query_of_the_same_dataframe_whole(spark, sorted_version) -> None:
    """The pyspark 4.2 trap: pushed-filter planning reused by the next query that pushes none."""
    target, _ = sorted_version
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")  # as the earlier reader required
    try:
        frame = spark.read.format("webdataset").load(str(target))
        assert [r["__key__"] for r in frame.where("__key__ = 'k0042'").collect()] == ["k0042"]
        assert frame.count() == 200
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


@pytest.mark.slow
def test_a_version_not_sorted_by_key_is_read_by_its_sample_index(spark, tmp_path) -> None:
    target = tmp_path / "unsorted"
    document = write(spark, target, sorted_by_key=False)
    assert not any(s["keys_ascending"] for s in document["shards"]) and len(document["shards"]) > 1
    frame = _range(spark, target, keyMin="k0042", keyMax="k0042")
    assert frame.rdd.getNumPartitions() == 1  # the index names the one shard that holds it
    assert [(r["__key__"], r["cls"]) for r in frame.collect()] == [("k0042", 2)]
    # without its index (an older writer's manifest) the version is read whole and filtered
    manifest = target / "_manifest.json"
    data = json.loads(manifest.read_text())
    data["sample_index"] = None
    manifest.write_text(json.dumps(data))
    frame = _range(spark, target, keyMin="k0042", keyMax="k0042")
    assert frame.rdd.getNumPartitions() == len(document["shards"])
    assert [(r["__key__"], r["cls"]) for r in frame.collect()] == [("k0042", 2)]
