"""Reshard a version: new shard caps, or a shard count that divides evenly among N workers.

    spark-submit jobs/reshard.py --input ROOT/versions/V --output ROOT2 --version V2 \\
        --shard-multiple 8 --max-shard-bytes 1GiB

(installed, no checkout: `spark-submit "$(python -m spark_webdataset.jobs.entry reshard.py)" ...`)

Member bytes are copied as they are (fields read as binary). With
`--shard-multiple N` every sample gets its shard number from its rank, so
the count is exactly a multiple of N and shards hold equal sample counts
(±1); the byte cap then sets the count, and a shard may pass it by the
spread of sample sizes. Order: kept (`source`) or re-mixed by seeded hash.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..dataset.build_rules import parse_max_shard_bytes
from ..dataset.layout import Dataset
from ..dataset.paths import absolute_uri
from ..errors import InputError, NeedsClassicSpark, WebDatasetError
from ..format.names import KEY_COLUMN
from ..format.shard_writer import DEFAULT_MAX_SHARD_BYTES
from ..format.sizes import spell_size
from .build import (
    absolute_local,
    order_samples,
    plan_partitions,
    print_summary,
    run_job,
    tar_bytes_column,
    version_summary,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

NO_CAP = 1 << 40  # with --shard-multiple the assignment, not the writer, cuts shards


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reshard", description=__doc__.split("\n")[0])
    parser.add_argument("--input", required=True, help="a version directory, dataset root or shard pattern")
    parser.add_argument("--output", required=True, help="dataset root; writes ROOT/versions/VERSION/")
    parser.add_argument("--version", required=True)
    parser.add_argument(
        "--max-shard-bytes",
        default=DEFAULT_MAX_SHARD_BYTES,
        help=f"hard cap per shard, tar bytes (default {spell_size(DEFAULT_MAX_SHARD_BYTES)})",
    )
    parser.add_argument("--max-samples-per-shard", type=int)
    parser.add_argument("--shard-multiple", type=int, help="make the shard count a multiple of N")
    parser.add_argument("--order", choices=("source", "hash"), default="source")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def exact_shards(df: DataFrame, shards: int, order: str, seed: int, rows: int) -> DataFrame:
    """One partition per shard, by rank: partition i holds ranks [i*rows/shards, (i+1)*rows/shards)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    if order == "hash":
        df = df.withColumn("__order__", F.xxhash64(F.col(KEY_COLUMN), F.lit(seed))).orderBy("__order__", KEY_COLUMN)
        df = df.drop("__order__")
    ranked = df.rdd.zipWithIndex().map(lambda pair: (pair[1] * shards // rows, (pair[1], *pair[0])))
    placed = ranked.partitionBy(shards, lambda shard: shard).values()
    spark = df.sparkSession

    schema = StructType([StructField("__rank__", LongType(), False), *df.schema.fields])
    frame = spark.createDataFrame(placed, schema=schema)
    return frame.sortWithinPartitions("__rank__").drop("__rank__")


def reshard(spark: SparkSession, args: argparse.Namespace) -> dict:
    from pyspark.sql import functions as F

    from ..spark.datasource import register
    from ..spark.options import WriteOptions

    if args.shard_multiple and type(spark).__module__.startswith("pyspark.sql.connect"):
        raise NeedsClassicSpark(  # before a byte is read
            "reshard --shard-multiple ranks rows with the RDD API, which Spark Connect does not offer: run it "
            'with spark-submit ("$(python -m spark_webdataset.jobs.entry reshard.py)"), or drop --shard-multiple'
        )
    register(spark)
    # Spark's driver (a Connect server, a JVM started elsewhere) resolves relative paths against its own cwd
    args = argparse.Namespace(
        **{**vars(args), "input": absolute_local(args.input), "output": absolute_uri(args.output, "--output")}
    )
    max_shard_bytes = parse_max_shard_bytes(args.max_shard_bytes, "--max-shard-bytes")
    version = Dataset(args.output).version(args.version)
    target = version.uri
    version.check_writable()
    started = time.monotonic()
    samples = spark.read.format("webdataset").load(args.input).drop("__url__")
    totals = samples.agg(F.count(F.lit(1)).alias("rows"), F.sum(tar_bytes_column(samples)).alias("bytes")).first()
    rows, tar_bytes = int(totals["rows"]), int(totals["bytes"] or 0)
    partitions = plan_partitions(rows, tar_bytes, max_shard_bytes, args.max_samples_per_shard)
    writer_cap = max_shard_bytes
    if args.shard_multiple:
        multiple = args.shard_multiple
        shards = multiple * math.ceil(math.ceil(tar_bytes / max_shard_bytes) / multiple)
        if args.max_samples_per_shard:
            shards = max(shards, multiple * math.ceil(rows / args.max_samples_per_shard / multiple))
        if rows < shards:
            raise InputError(f"{rows} samples cannot fill {shards} shards (a multiple of {multiple})")
        arranged = exact_shards(samples, shards, args.order, args.seed, rows)
        writer_cap = NO_CAP
        print(f"reshard: {rows} samples -> exactly {shards} shards (multiple of {multiple})", flush=True)
    else:
        arranged = order_samples(samples, partitions, args.order if args.order == "hash" else "source", args.seed)
    options = WriteOptions(
        path=target,
        max_shard_bytes=writer_cap,
        max_samples_per_shard=None if args.shard_multiple else args.max_samples_per_shard or None,
    )
    # Spark options are strings: the typed values, spelt out
    arranged.write.format("webdataset").options(**options.spark_options()).mode("overwrite").save(target)
    manifest = version.read_manifest()
    assert manifest is not None
    if manifest.samples != rows:
        raise WebDatasetError(f"{rows} input samples but {manifest.samples} written: samples were lost")
    return version_summary(args.version, target, manifest, time.monotonic() - started)


def main(argv: Sequence[str] | None = None) -> int:
    code, summary = run_job("reshard", reshard, parser().parse_args(argv))
    if summary is not None:
        print_summary(summary, "reshard")
    return code
