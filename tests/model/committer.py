"""The machine's cheap writer: the data source's own task path and driver commit, without Spark.

`WebDatasetWriter.write` stages what one task would, `commit` runs the driver's commit protocol
(`dataset/commit.py`), `abort` what Spark calls on failure: the real commit code at a fraction of
a Spark job's cost. Also a script, for the faults the machine injects in a process of its own:

    python committer.py VERSION_URI ROWS_JSON OVERWRITE PARENT CHANGE LEASE_SECONDS

(ROWS_JSON: {key: [txt, bin-as-latin-1 or null]}; PARENT/CHANGE "-" for none.) Exit 0: committed;
3: refused with a webdataset error, named on stderr.
"""

from __future__ import annotations

import json
import sys

import pyarrow as pa
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from spark_webdataset.errors import WebDatasetError
from spark_webdataset.spark.options import WriteOptions
from spark_webdataset.spark.writer import WebDatasetWriter

SAMPLES_PER_SHARD = 3  # small shards: changes touch some and reference the others
Row = tuple[str, "bytes | None"]  # txt (utf-8 text), bin (bytes or null: no member)

SCHEMA = StructType(
    [StructField("__key__", StringType()), StructField("txt", StringType()), StructField("bin", BinaryType())]
)
# the same field names with another type for `bin`: a chain's types are part of its schema
RETYPED = StructType(
    [StructField("__key__", StringType()), StructField("txt", StringType()), StructField("bin", StringType())]
)
KEYS_ONLY = StructType([StructField("__key__", StringType())])


def _batch(rows: dict[str, Row], change: str | None, retyped: bool) -> tuple[StructType, pa.RecordBatch]:
    keys = list(rows)
    if change == "delete":
        return KEYS_ONLY, pa.record_batch([pa.array(keys, pa.string())], names=["__key__"])
    txt = pa.array([rows[k][0] for k in keys], pa.string())
    if retyped:
        data = pa.array([None if rows[k][1] is None else rows[k][1].decode("latin-1") for k in keys], pa.string())
        return RETYPED, pa.record_batch([pa.array(keys, pa.string()), txt, data], names=["__key__", "txt", "bin"])
    data = pa.array([rows[k][1] for k in keys], pa.binary())
    return SCHEMA, pa.record_batch([pa.array(keys, pa.string()), txt, data], names=["__key__", "txt", "bin"])


def start(
    uri: str,
    rows: dict[str, Row],
    *,
    overwrite: bool,
    parent: str | None = None,
    change: str | None = None,
    lease_seconds: float = 120.0,
    retyped: bool = False,
) -> tuple[WebDatasetWriter, object]:
    """A job's start (the driver's writer: checks, parent resolved, base read) and its one task's
    staging; `finish` commits it. Between the two, another job may commit (a race)."""
    options = {"path": uri, "maxSamplesPerShard": str(SAMPLES_PER_SHARD), "commitLeaseSeconds": repr(lease_seconds)}
    if parent is not None:
        options["parent"] = parent
    if change is not None:
        options["change"] = change
    schema, batch = _batch(rows, change, retyped)
    writer = WebDatasetWriter(WriteOptions.parse(options), schema, overwrite=overwrite)
    try:
        message = writer.write(iter([batch]))
    except BaseException:
        writer.abort([None])
        raise
    return writer, message


def finish(started: tuple[WebDatasetWriter, object]) -> None:
    """The driver's commit of a started job (abort on failure, as Spark does)."""
    writer, message = started
    try:
        writer.commit([message])
    except BaseException:
        writer.abort([message])
        raise


def commit(
    uri: str,
    rows: dict[str, Row],
    *,
    overwrite: bool,
    parent: str | None = None,
    change: str | None = None,
    lease_seconds: float = 120.0,
    retyped: bool = False,
) -> None:
    """Write `rows` to the version at `uri` as one job of one task would (abort on failure, as Spark does)."""
    finish(
        start(
            uri, rows, overwrite=overwrite, parent=parent, change=change, lease_seconds=lease_seconds, retyped=retyped
        )
    )


if __name__ == "__main__":
    uri, rows_json, overwrite, parent, change, lease = sys.argv[1:7]
    rows = {k: (t, None if b is None else b.encode("latin-1")) for k, (t, b) in json.loads(rows_json).items()}
    try:
        commit(
            uri,
            rows,
            overwrite=overwrite == "1",
            parent=None if parent == "-" else parent,
            change=None if change == "-" else change,
            lease_seconds=float(lease),
        )
    except WebDatasetError as error:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(3)
    print("committed")
