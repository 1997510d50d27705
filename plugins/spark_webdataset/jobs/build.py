"""The sharding job: a Spark source in, one WebDataset version out.

    spark-submit jobs/build_webdataset.py --source data/demo/digits \\
        --output data/datasets/digits --version 2026-12-01 \\
        --key "format_string('%05d', id)" --field png=image --field cls=label

(installed, no checkout: `spark-submit "$(python -m spark_webdataset.jobs.entry build_webdataset.py)" ...`)

It sizes the partitions from the data (exact tar bytes, counted in one
aggregate pass) so that each partition fills about one shard, orders the
samples reproducibly, writes `ROOT/versions/V/` through the `webdataset`
data source and checks that every source row is in the manifest.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..dataset.build_rules import APPEND, CHANGES, DELETE, ORDERS, BuildBase, Spelling, parse_max_shard_bytes
from ..dataset.layout import Dataset, Version
from ..dataset.paths import absolute_uri, check_dataset_root, check_version_id
from ..errors import (
    EXIT_BAD_INPUT,
    EXIT_NO_ANSWER,
    EXIT_OK,
    InputError,
    WebDatasetError,
    exit_code_of,
    from_spark,
)
from ..format.manifest import Manifest
from ..format.names import KEY_COLUMN
from ..format.shard_writer import DEFAULT_MAX_SHARD_BYTES
from ..format.sizes import format_size, spell_size

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

# Partitions are sized to this share of the cap, so the spread of hash
# partitioning rarely spills a partition into a second, small shard.
TARGET_FILL = 0.9
JOB_NAMES = Spelling(change="--change", parent="--parent", order="--order")  # the build rules, as arguments


@dataclass(frozen=True)
class Field:
    extension: str
    expression: str


def parse_field(text: str) -> Field:
    extension, sep, expression = text.partition("=")
    if not sep or not extension or not expression:
        raise argparse.ArgumentTypeError(f"--field {text!r}: write EXT=COLUMN_OR_SQL, e.g. png=image")
    return Field(extension, expression)


def parse_write_option(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--write-option {text!r}: write NAME=VALUE, e.g. commitLeaseSeconds=300")
    return name, value


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="build_webdataset", description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--source", help="URI of the source data (any Spark format)")
    source.add_argument("--source-table", help="a table in the Spark catalog instead of --source")
    parser.add_argument("--source-format", default="parquet", help="Spark format of --source (default parquet)")
    parser.add_argument("--output", required=True, help="dataset root; the job writes ROOT/versions/VERSION/")
    parser.add_argument("--version", required=True, help="version id, e.g. 2026-12-01")
    parser.add_argument("--key", required=True, help="column or SQL expression for each sample's key")
    parser.add_argument(
        "--field",
        action="append",
        type=parse_field,
        default=[],
        metavar="EXT=COLUMN_OR_SQL",
        help="one member per sample (repeat; extensions may hold dots: seg.png). Default: every other column",
    )
    parser.add_argument(
        "--max-shard-bytes",
        default=DEFAULT_MAX_SHARD_BYTES,
        help=f"hard cap per shard, tar bytes (default {spell_size(DEFAULT_MAX_SHARD_BYTES)})",
    )
    parser.add_argument("--max-samples-per-shard", type=int, default=None)
    parser.add_argument("--order", choices=ORDERS, default="hash", help="sample order (default hash)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the hash order")
    parser.add_argument(
        "--mode",
        choices=("overwrite", "append"),
        help="overwrite replaces the version's content; append commits onto it (default: append for --change "
        "delete, so a day's delete lands on that day's upsert instead of replacing it; overwrite otherwise)",
    )
    parser.add_argument(
        "--parent",
        help="build on this published version of the root (LATEST, or an id): its shards are referenced, "
        "not copied; with no published version yet, LATEST gives a full build",
    )
    parser.add_argument(
        "--change",
        choices=CHANGES,
        default=APPEND,
        help="what the source does to --parent: append new keys (one already in the parent fails), upsert "
        "(replace a key the parent holds, add the rest) or delete (remove the source's keys, given by --key; "
        "a key not there is counted, not an error). Only the parent's shards holding replaced or deleted "
        "keys are rewritten (default append)",
    )
    parser.add_argument(
        "--reader-batch-rows",
        type=int,
        default=256,
        help="rows per columnar batch when reading parquet/orc (Spark's 4096 holds 4096 images at once; default 256)",
    )
    parser.add_argument("--mtime", type=int, default=0, help="mtime of every tar member (default 0)")
    parser.add_argument("--allow-pax", action="store_true", help="allow PAX headers for long/non-ASCII names")
    parser.add_argument(
        "--skip-if-published",
        action="store_true",
        help="exit 0 without writing if the version is published already (idempotent re-runs)",
    )
    parser.add_argument(
        "--write-option",
        action="append",
        type=parse_write_option,
        default=[],
        metavar="NAME=VALUE",
        help="any other option of the webdataset writer (repeat), e.g. commitLeaseSeconds=300",
    )
    parser.add_argument("--summary-json", help="also write the summary as JSON to this local path")
    return parser


def select_samples(df: DataFrame, key: str, fields: Sequence[Field]) -> DataFrame:
    """The writer's input: `__key__` then one column per field, in the given order."""
    if not fields:
        key_column = key.strip("`")
        fields = [Field(c, f"`{c}`") for c in df.columns if c != key_column]
    return df.selectExpr(
        f"CAST(({key}) AS STRING) AS `{KEY_COLUMN}`",
        *(f"({f.expression}) AS `{f.extension}`" for f in fields),
    )


def tar_bytes_column(df: DataFrame) -> Column:
    """Exact tar bytes of each sample (text of non-binary fields is close enough for sizing)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType

    total = F.lit(0)
    for field in df.schema.fields:
        if field.name == KEY_COLUMN:
            continue
        value = F.col(f"`{field.name}`")
        if isinstance(field.dataType, (BinaryType, StringType)):
            length = F.octet_length(value)
        else:
            length = F.octet_length(F.to_json(F.array(value))) - 2
        member = F.lit(512) + F.ceil(length / 512) * 512
        total = total + F.when(value.isNull(), 0).otherwise(member)
    return total.cast("long")


def plan_partitions(samples: int, tar_bytes: int, max_shard_bytes: int, max_samples: int | None) -> int:
    by_bytes = math.ceil(tar_bytes / (max_shard_bytes * TARGET_FILL))
    by_samples = math.ceil(samples / (max_samples * TARGET_FILL)) if max_samples else 1
    return max(1, by_bytes, by_samples)


def order_samples(df: DataFrame, partitions: int, order: str, seed: int) -> DataFrame:
    from pyspark.sql import functions as F

    if order == "hash":
        mixed = df.withColumn("__order__", F.xxhash64(F.col(KEY_COLUMN), F.lit(seed)))
        return (
            mixed.repartition(partitions, "__order__").sortWithinPartitions("__order__", KEY_COLUMN).drop("__order__")
        )
    if order == "key":
        return df.repartitionByRange(partitions, KEY_COLUMN).sortWithinPartitions(KEY_COLUMN)
    return df.coalesce(partitions)  # never more partitions than the source has (and no RDD: Spark Connect)


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def absolute_paths(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with --output and a local --source absolute: Spark resolves a relative path against its
    driver's working directory (a Spark Connect server's, or a JVM started elsewhere), this job
    against its own, and the two wrote and looked in different places."""
    args = argparse.Namespace(**vars(args))
    args.output = absolute_uri(args.output, "--output")
    args.source = absolute_local(args.source)
    return args


def absolute_local(path: str | None) -> str | None:
    """A local path made absolute; a URI (hdfs:, s3a:, gs://...) or a table stays as given."""
    return os.path.abspath(path) if path and not _SCHEME.match(path) else path


def committed(version: Version) -> Manifest:
    """The manifest the job's write just committed, or an error that says why it is not there."""
    manifest = version.read_manifest()
    if manifest is None:
        raise WebDatasetError(
            f"{version.uri}: the write reported success, but there is no manifest there: Spark and this job "
            "see different storage (give --output as an absolute path or a URI both can reach)"
        )
    return manifest


def build(spark: SparkSession, args: argparse.Namespace) -> dict:
    """Run the job; return the summary. Raises WebDatasetError on bad input."""
    from pyspark.sql import functions as F

    from ..spark.datasource import register
    from ..spark.options import WriteOptions

    register(spark)
    args = absolute_paths(args)
    if args.mode is None:
        args.mode = "append" if args.change == DELETE else "overwrite"
    max_shard_bytes = parse_max_shard_bytes(args.max_shard_bytes, "--max-shard-bytes")
    version = Dataset(args.output).version(args.version)
    target = version.uri
    if version.is_published() and args.skip_if_published:
        manifest = committed(version)
        print(f"build_webdataset: version {args.version!r} is published already; nothing to write", flush=True)
        return version_summary(args.version, target, manifest, 0.0, skipped=True)
    version.check_writable()
    BuildBase.checked(args.change, args.parent, JOB_NAMES)
    before = 0
    if args.mode == "append":
        existing = version.committed_manifest()
        before = existing.samples if existing else 0
    started = time.monotonic()
    for reader in ("parquet", "orc"):
        spark.conf.set(f"spark.sql.{reader}.columnarReaderBatchSize", str(args.reader_batch_rows))
    if args.source_table:
        source = spark.table(args.source_table)
    else:
        source = spark.read.format(args.source_format).load(args.source)
    if args.change == DELETE:
        return _delete(args, version, source.selectExpr(f"CAST(({args.key}) AS STRING) AS `{KEY_COLUMN}`"), started)
    samples_df = select_samples(source, args.key, args.field)
    totals = samples_df.agg(F.count(F.lit(1)).alias("rows"), F.sum(tar_bytes_column(samples_df)).alias("bytes")).first()
    rows, tar_bytes = int(totals["rows"]), int(totals["bytes"] or 0)
    partitions = plan_partitions(rows, tar_bytes, max_shard_bytes, args.max_samples_per_shard)
    print(
        f"build_webdataset: {rows} samples, ~{format_size(tar_bytes)} of tar -> {partitions} partition(s), "
        f"order {args.order}",
        flush=True,
    )
    options = WriteOptions(
        path=target,
        max_shard_bytes=max_shard_bytes,
        max_samples_per_shard=args.max_samples_per_shard or None,
        mtime=args.mtime,
        allow_pax=args.allow_pax,
        parent=args.parent,
        change=args.change,
    )
    writer = (
        order_samples(samples_df, partitions, args.order, args.seed)
        .write.format("webdataset")
        .options(**options.spark_options())  # Spark options are strings: the typed values, spelt out
        .mode(args.mode)
    )
    for name, value in args.write_option:
        writer = writer.option(name, value)
    writer.save(target)
    seconds = time.monotonic() - started
    manifest = committed(version)
    change = manifest.run.get("change")
    if change is not None:  # an upsert: every row replaced a sample or added one
        if change["added"] + change["replaced"] != rows:
            raise WebDatasetError(
                f"{rows} source rows but {change['added']} samples added and {change['replaced']} replaced in "
                f"{target}: rows were lost"
            )
        return version_summary(args.version, target, manifest, seconds)
    if args.mode == "overwrite" and manifest.parent is not None:
        before = Dataset(args.output).published(manifest.parent)[1].samples  # the parent's, referenced
    if manifest.samples - before != rows:
        raise WebDatasetError(
            f"{rows} source rows but {manifest.samples - before} new samples in {target}: rows were lost"
        )
    return version_summary(args.version, target, manifest, seconds)


def _delete(args: argparse.Namespace, version, keys_df: DataFrame, started: float) -> dict:
    """A delete: the source's keys go from the parent; its shards that held them are rewritten."""
    from ..spark.options import WriteOptions

    options = WriteOptions(path=version.uri, parent=args.parent, change=DELETE)
    keys_df.write.format("webdataset").options(**options.spark_options()).mode(args.mode).save(version.uri)
    seconds = time.monotonic() - started
    manifest = committed(version)
    change = manifest.run["change"]
    print(
        f"build_webdataset: deleted {change['deleted']} sample(s) of {change['requested']} key row(s) given; "
        f"{change['absent']} key(s) not in the parent; {change['shards_rewritten']} shard(s) rewritten",
        flush=True,
    )
    return version_summary(args.version, version.uri, manifest, seconds)


def version_summary(version: str, target: str, manifest: Manifest, seconds: float, skipped: bool = False) -> dict:
    stored = sum(shard.bytes for shard in manifest.own_shards)
    return {
        "version": version,
        "uri": target,
        "shards": len(manifest.shards),
        "samples": manifest.samples,
        "bytes": manifest.bytes,
        "largest_shard_bytes": max((s.bytes for s in manifest.shards), default=0),
        "seconds": round(seconds, 3),
        "mb_per_s": round(stored / 1e6 / seconds, 1) if seconds else None,  # what this job wrote
        "spark_application_id": manifest.run.get("spark_application_id"),
        "skipped": skipped,
        "parent": manifest.parent,
        "bytes_stored": stored,
        "bytes_referenced": manifest.bytes - stored,
        **({"change": manifest.run["change"]} if "change" in manifest.run else {}),
    }


def print_summary(summary: dict, name: str = "build_webdataset") -> None:
    if summary["skipped"]:
        return
    print(
        f"{name}: wrote {summary['shards']} shards, {summary['samples']} samples, "
        f"{format_size(summary['bytes'])} in {summary['seconds']:.1f} s ({summary['mb_per_s']} MB/s) "
        f"to {summary['uri']}"
        if not summary.get("parent")
        else f"{name}: {summary['uri']} on {summary['parent']}: {summary['shards']} shards, {summary['samples']} "
        f"samples; {format_size(summary['bytes_stored'])} written in {summary['seconds']:.1f} s, "
        f"{format_size(summary['bytes_referenced'])} referenced"
    )
    print(f"{name} summary: " + json.dumps(summary, sort_keys=True), flush=True)


# Spark's INFO lines (150-240 of them, ending "Successfully stopped SparkContext") would bury the job's
# own answer: a job that starts its session sets this level, unless spark-submit's --conf sets one.
LOG_LEVEL = "WARN"
LOG_LEVEL_CONF = "spark.log.level"


def spark_session(quiet: bool = True) -> SparkSession:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    if os.environ.get("SPARK_REMOTE"):  # Spark Connect (sc://host:port): the server has the master and its logs
        return SparkSession.builder.getOrCreate()
    builder = SparkSession.builder.appName("build_webdataset")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # run by plain python, not spark-submit
        builder = builder.master(os.environ.get("SPARK_MASTER", "local[*]"))
    if quiet and not SparkConf().contains(LOG_LEVEL_CONF):
        builder = builder.config(LOG_LEVEL_CONF, LOG_LEVEL)
    return builder.getOrCreate()


def _quiet_pyspark_error_logs() -> None:
    """PySpark logs every analysis error with its query context as a JSON record on stdout; the job
    names the error itself, once, in its `error:` line."""
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True


# Spark's conditions for a source, table or column that is not there: bad input, no retry helps.
MISSING_INPUT_CONDITIONS = ("PATH_NOT_FOUND", "TABLE_OR_VIEW_NOT_FOUND", "UNRESOLVED_COLUMN", "UNRESOLVED_ROUTINE")


def _condition(error: BaseException) -> str:
    return getattr(error, "getCondition", lambda: None)() or ""


def _names_missing_input(error: BaseException) -> bool:
    return _condition(error).split(".")[0] in MISSING_INPUT_CONDITIONS


def failure(error: BaseException) -> tuple[int, str]:
    """A job's exit code (the table in errors.py) and its one-line `error:` text for what ended it."""
    cause = from_spark(error)
    if cause is not None:
        return exit_code_of(cause), str(cause) or type(cause).__name__
    condition = _condition(error)
    if condition.startswith("UNRESOLVED_COLUMN"):  # the column, and the ones there are (Spark's closest first)
        parameters = error.getMessageParameters() or {}
        there = parameters.get("proposal")
        return EXIT_BAD_INPUT, (
            f"no column {parameters.get('objectName', '?')} in the source (--key and --field name its columns or SQL "
            f"on them)" + (f"; its columns: {there.strip('[]')}" if there else "")
        )
    if condition:  # Spark's message without the plan it appends after its first line
        text = error.getMessage().split("\n", 1)[0]
        return (EXIT_BAD_INPUT if _names_missing_input(error) else EXIT_NO_ANSWER), text
    lines = str(error).splitlines() or [type(error).__name__]
    # a Py4JJavaError: "An error occurred while calling o55.save." then ": <the Java exception>" and its trace
    text = next((line[2:] for line in lines if line.startswith(": ")), lines[0])
    return (EXIT_BAD_INPUT if isinstance(error, ValueError) else exit_code_of(error)), text


def run_job(name: str, job, args: argparse.Namespace) -> tuple[int, dict | None]:
    """Run `job(spark, args)` in a SparkSession: 0 and its summary, or the exit code of the table in
    errors.py after one `error:` line, printed after Spark stopped so that it is the console's last."""
    try:  # before a SparkSession starts: a bad id, or a root inside another dataset or a version
        check_version_id(args.version)
        check_dataset_root(args.output)
    except InputError as error:
        print(f"{name}: error: {error}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT, None
    from pyspark.sql import SparkSession

    owned = SparkSession.getActiveSession() is None  # a caller's session (a notebook, a test) stays up
    spark = spark_session(quiet=owned)
    _quiet_pyspark_error_logs()
    try:
        return EXIT_OK, job(spark, args)
    except Exception as error:  # noqa: BLE001 - Spark wraps our errors; show the cause
        code, message = failure(error)
    finally:
        if owned:
            spark.stop()
    print(f"{name}: error: {message}", file=sys.stderr, flush=True)
    return code, None


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    code, summary = run_job("build_webdataset", build, args)
    if summary is None:
        return code
    print_summary(summary)
    if args.summary_json:
        with open(args.summary_json, "w") as stream:
            json.dump(summary, stream, indent=1, sort_keys=True)
    return EXIT_OK
