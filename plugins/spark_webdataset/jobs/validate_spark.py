"""Validation as a Spark job: one task per shard, and Spark's group-by proves keys unique at any scale."""

from __future__ import annotations

from typing import Sequence

from ..dataset.validate import MAX_REPORTED_ERRORS, Duplicates, ShardCheck, check_shard_task


def spark_check(master: str) -> ShardCheck:
    """A `check` for `validate_version` that runs on the Spark master `master`."""

    def check(uri: str, tasks: list, required: Sequence[str]) -> tuple[list[dict], Duplicates]:
        return check_with_spark(uri, tasks, required, master)

    return check


def check_with_spark(uri: str, tasks: list, required: Sequence[str], master: str) -> tuple[list[dict], Duplicates]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = SparkSession.builder.master(master).appName("validate_webdataset").getOrCreate()
    jobs = [(uri, name, expected, list(required), None, size) for name, size, expected in tasks]
    checked = spark.sparkContext.parallelize(jobs, max(1, len(jobs))).map(check_shard_task).cache()
    results = checked.map(lambda r: {k: v for k, v in r.items() if k != "keys"}).collect()
    keys = checked.flatMap(lambda r: ((key, r["name"]) for key in r["keys"])).toDF(["key", "shard"])
    grouped = (
        keys.groupBy("key")
        .agg(F.count("*").alias("n"), F.sort_array(F.collect_set("shard")).alias("shards"))
        .where("n > 1")
        .cache()
    )
    count = int(grouped.agg(F.sum(F.col("n") - 1)).first()[0] or 0)
    repeated = grouped.orderBy("key").limit(MAX_REPORTED_ERRORS).collect()
    grouped.unpersist()
    checked.unpersist()
    return results, (count, [(row["key"], list(row["shards"])) for row in repeated])
