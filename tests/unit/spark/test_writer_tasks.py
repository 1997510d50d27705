"""A task of the batch writer, run on its own (no TaskContext: partition 0, attempt 0)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from spark_webdataset.dataset.commit import commit_job
from spark_webdataset.format.manifest import Manifest
from spark_webdataset.spark.options import WriteOptions
from spark_webdataset.spark.writer import WebDatasetWriter

SCHEMA = StructType([StructField("__key__", StringType()), StructField("bin", BinaryType())])


def test_an_empty_partition_stages_nothing_and_commits_beside_a_full_one(tmp_path) -> None:
    """Nothing to upload, and nothing a sibling task could leave behind after Spark aborts its job."""
    writer = WebDatasetWriter(WriteOptions.parse({"path": str(tmp_path)}), SCHEMA, overwrite=True)
    empty = writer.write(iter([]))
    assert empty.shards == [] and empty.index_path is None
    assert not (tmp_path / "_staging" / writer.job_id / empty.staging.rsplit("/", 1)[-1]).exists()
    batch = pa.record_batch({"__key__": pa.array(["k0", "k1"]), "bin": pa.array([b"a", b"b"], pa.binary())})
    full = writer.write(iter([batch]))
    full.partition = 1  # as Spark would number it
    manifest = commit_job(writer.commit_request([empty, full]))
    assert manifest.samples == 2 and Manifest.from_json((tmp_path / "_manifest.json").read_bytes()) == manifest


def test_an_empty_partition_of_a_delete_stages_nothing(tmp_path) -> None:
    writer = WebDatasetWriter(WriteOptions.parse({"path": str(tmp_path)}), SCHEMA, overwrite=True)
    # the task's side of a delete (the driver resolves the parent; a task only stages keys)
    writer.options = WriteOptions.parse({"path": str(tmp_path), "change": "delete", "parent": "LATEST"})
    message = writer.write(iter([]))
    assert message.index_path is None and message.deleted_rows == 0
    assert not (tmp_path / "_staging" / writer.job_id / message.staging.rsplit("/", 1)[-1]).exists()
