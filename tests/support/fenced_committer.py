"""A real committer without Spark, for the fencing tests: it stages samples through the writer's
task path and commits them through the driver's commit, in a process a test can freeze.

    python fenced_committer.py VERSION_URI PREFIX COUNT LEASE_SECONDS

With SPARK_WEBDATASET_FAULTS="commit:planned=stop" it stops itself (SIGSTOP) at that step, as a
GC pause or a stopped VM would; the test resumes it with SIGCONT. Exit 0: committed (or found
committed by another's roll forward); 3: refused with a webdataset error, named on stderr.
"""

from __future__ import annotations

import sys

import pyarrow as pa
from pyspark.sql.types import StringType, StructField, StructType

from spark_webdataset.errors import WebDatasetError
from spark_webdataset.spark.options import WriteOptions
from spark_webdataset.spark.writer import WebDatasetWriter

SCHEMA = StructType([StructField("__key__", StringType()), StructField("txt", StringType())])
SAMPLES_PER_SHARD = 10


def keys(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i:05d}" for i in range(count)]


def commit_samples(uri: str, prefix: str, count: int, lease_seconds: float = 120.0) -> None:
    """Stage `count` samples keyed PREFIXnnnnn (as one task would) and commit them (append)."""
    options = WriteOptions.parse(
        {"path": uri, "maxSamplesPerShard": str(SAMPLES_PER_SHARD), "commitLeaseSeconds": str(lease_seconds)}
    )
    writer = WebDatasetWriter(options, SCHEMA, overwrite=False)
    names = keys(prefix, count)
    batch = pa.record_batch([pa.array(names), pa.array([f"text of {key}" for key in names])], names=["__key__", "txt"])
    message = writer.write(iter([batch]))
    writer.commit([message])


def published(root: str, version: str, samples: int = 5, logical_date: str | None = None) -> None:
    """`samples` samples committed (commit_samples) into root's `version`, validated and published."""
    from spark_webdataset.dataset.layout import Dataset
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.dataset.validate import validate_version

    uri = Dataset(root).version(version).uri
    commit_samples(uri, f"{version}-", samples)
    assert validate_version(uri).ok
    publish(root, version, logical_date=logical_date)


if __name__ == "__main__":
    uri, prefix, count, lease = sys.argv[1:5]
    try:
        commit_samples(uri, prefix, int(count), float(lease))
    except WebDatasetError as error:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(3)
    print("committed")
