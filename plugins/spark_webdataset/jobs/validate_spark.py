"""Validation as a Spark job: one task per shard, and Spark's group-by proves keys unique at any scale."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..dataset.index_proof import IndexRows, check_index
from ..dataset.validate import MAX_REPORTED_ERRORS, Duplicates, ShardCheck, check_shard_task

SORTED_ROWS_BATCH = 1 << 16  # rows of the sorted (key, shard, offset, length) stream the driver compares at once


def spark_check(master: str) -> ShardCheck:
    """A `check` for `validate_version` that runs on the Spark master `master`."""

    def check(
        uri: str, tasks: list, required: Sequence[str], index: IndexRows
    ) -> tuple[list[dict], Duplicates, list[str]]:
        return check_with_spark(uri, tasks, required, master, index)

    return check


def check_with_spark(
    uri: str, tasks: list, required: Sequence[str], master: str, index: IndexRows = None
) -> tuple[list[dict], Duplicates, list[str]]:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = SparkSession.builder.master(master).appName("validate_webdataset").getOrCreate()
    jobs = [(uri, name, expected, list(required), None, size) for name, size, expected in tasks]
    checked = spark.sparkContext.parallelize(jobs, max(1, len(jobs))).map(check_shard_task).cache()
    per_sample = ("keys", "offsets", "lengths")
    results = checked.map(lambda r: {k: v for k, v in r.items() if k not in per_sample}).collect()
    rows = checked.flatMap(lambda r: zip(r["keys"], [r["name"]] * len(r["keys"]), r["offsets"], r["lengths"]))
    samples = rows.toDF("key string, shard string, `offset` long, `length` long").cache()
    keys = samples.select("key", "shard")
    grouped = (
        keys.groupBy("key")
        .agg(F.count("*").alias("n"), F.sort_array(F.collect_set("shard")).alias("shards"))
        .where("n > 1")
        .cache()
    )
    count = int(grouped.agg(F.sum(F.col("n") - 1)).first()[0] or 0)
    repeated = grouped.orderBy("key").limit(MAX_REPORTED_ERRORS).collect()
    grouped.unpersist()

    def scanned() -> Iterator[pa.RecordBatch]:
        batch: list = []
        for row in samples.orderBy("key").toLocalIterator():
            batch.append(row)
            if len(batch) >= SORTED_ROWS_BATCH:
                yield _batch(batch)
                batch = []
        if batch:
            yield _batch(batch)

    def _batch(batch: list) -> pa.RecordBatch:
        return pa.record_batch(
            [pa.array([row[at] for row in batch]) for at in range(4)], names=["key", "shard", "offset", "length"]
        )

    index_errors = check_index(index, scanned, count, results)
    samples.unpersist()
    checked.unpersist()
    return results, (count, [(row["key"], list(row["shards"])) for row in repeated]), index_errors
