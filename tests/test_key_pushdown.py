"""Key filters skip shards: a key-sorted version opens only the shards whose key range can match."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, In, IsNotNull, LessThanOrEqual, StringStartsWith

from spark_webdataset.spark.reader import ReadOptions, WebDatasetReader, key_range_test

KEY = ("__key__",)


@pytest.mark.parametrize(
    "condition, inside, outside",
    [
        (EqualTo(KEY, "k5"), ("k1", "k9"), ("k6", "k9")),
        (In(KEY, ("a", None, "k5")), ("k1", "k9"), ("k6", "k9")),
        (LessThanOrEqual(KEY, "k5"), ("k5", "k9"), ("k6", "k9")),
        (GreaterThan(KEY, "k5"), ("k1", "k6"), ("k1", "k5")),
        (StringStartsWith(KEY, "k5"), ("k1", "k9"), ("k6", "k9")),
        (StringStartsWith(KEY, "k5"), ("k51", "k9"), ("k1", "k49")),
    ],
)
def test_a_key_range_may_match_or_cannot(condition, inside: tuple[str, str], outside: tuple[str, str]) -> None:
    test = key_range_test(condition)
    assert test is not None and test(*inside) and not test(*outside)


def test_other_columns_and_other_filters_prune_nothing() -> None:
    assert key_range_test(EqualTo(("cls",), "k5")) is None
    assert key_range_test(EqualTo(KEY, 5)) is None
    assert key_range_test(IsNotNull(KEY)) is None
    assert key_range_test(In(KEY, ("k5", 5))) is None


def write(spark, target: Path, sorted_by_key: bool) -> dict:
    # four partitions of 50 ids each, in order: keys ascend in every task, as with --order key
    frame = spark.range(0, 200, 1, 4).selectExpr("format_string('k%04d', id) AS __key__", "id % 10 AS cls")
    if not sorted_by_key:
        frame = frame.sortWithinPartitions("cls", "__key__")
    frame.write.format("webdataset").option("maxSamplesPerShard", 25).mode("overwrite").save(str(target))
    return json.loads((target / "_manifest.json").read_text())


@pytest.mark.slow
def test_pushdown_opens_only_matching_shards_and_returns_the_same_rows(spark, tmp_path) -> None:
    target = tmp_path / "sorted"
    document = write(spark, target, sorted_by_key=True)
    assert len(document["shards"]) == 8 and all(s["keys_ascending"] for s in document["shards"])
    frame = spark.read.format("webdataset").schema("__key__ string, cls int").load(str(target))
    every = frame.collect()  # the whole version, once, to compare the filtered reads with
    cases = {  # condition: (shards to open, the same condition in Python)
        "__key__ = 'k0042'": (1, lambda r: r["__key__"] == "k0042"),
        "__key__ IN ('k0003', 'k0197')": (2, lambda r: r["__key__"] in ("k0003", "k0197")),
        "__key__ >= 'k0180'": (1, lambda r: r["__key__"] >= "k0180"),
        "__key__ < 'k0040'": (2, lambda r: r["__key__"] < "k0040"),
        "startswith(__key__, 'k019')": (1, lambda r: r["__key__"].startswith("k019")),
        "__key__ = 'nope'": (1, lambda r: False),  # no shard: Spark runs one empty partition instead
        "cls = 3": (8, lambda r: r["cls"] == 3),  # not a key filter: every shard
    }
    for condition, (shards, predicate) in cases.items():
        filtered = frame.where(condition)
        assert filtered.rdd.getNumPartitions() == shards, condition
        assert sorted(filtered.collect()) == sorted(r for r in every if predicate(r)), condition
    # the planner's own view: which shards a key filter leaves to open
    reader = WebDatasetReader(ReadOptions(str(target)), frame.schema)
    reader.pushFilters([EqualTo(KEY, "nope")])
    assert reader.partitions() == []
    reader.pushFilters([GreaterThan(KEY, "k0173"), LessThanOrEqual(KEY, "k0175")])  # k0174..k0175
    assert [p.url.rsplit("/", 1)[-1] for p in reader.partitions()] == ["shard-000006.tar", "shard-000007.tar"]


@pytest.mark.slow
def test_a_version_not_sorted_by_key_is_read_whole(spark, tmp_path) -> None:
    target = tmp_path / "unsorted"
    document = write(spark, target, sorted_by_key=False)
    assert not any(s["keys_ascending"] for s in document["shards"])
    frame = spark.read.format("webdataset").schema("__key__ string, cls int").load(str(target))
    filtered = frame.where("__key__ = 'k0042'")
    assert filtered.rdd.getNumPartitions() == len(document["shards"])
    assert [r["cls"] for r in filtered.collect()] == [2]
