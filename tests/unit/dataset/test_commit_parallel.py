"""The commit's parallel renames: the same result as one by one, and a failure half-way that the
journal lets the next committer finish. Spark is not needed: the version is laid out as tasks
leave it (a staged shard and a key run each) and the real commit_job runs on it."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from spark_webdataset.dataset.commit import commit_job
from spark_webdataset.dataset.journal import journal_job, roll_forward
from spark_webdataset.dataset.layout import Version
from spark_webdataset.dataset.lock import CommitLock
from spark_webdataset.dataset.tree import STAGED_INDEX_NAME
from spark_webdataset.format.manifest import Manifest
from spark_webdataset.format.sample_index import task_rows, write_task_run
from spark_webdataset.format.shard_writer import ShardInfo
from spark_webdataset.spark.options import WriteOptions
from spark_webdataset.spark.writer import WebDatasetCommitMessage, WebDatasetWriter
from spark_webdataset.storage.local import LocalStorage
from tests.support.helpers import crc32c_text

SHARDS = 200
SCHEMA = StructType([StructField("__key__", StringType()), StructField("bin", BinaryType())])


def staged_write(directory: Path) -> tuple[WebDatasetWriter, list[WebDatasetCommitMessage]]:
    """A writer and the messages of SHARDS task attempts, one staged shard and index run each."""
    writer = WebDatasetWriter(WriteOptions.parse({"path": str(directory)}), SCHEMA, overwrite=True)
    storage = writer.version.storage
    messages = []
    for partition in range(SHARDS):
        staging = storage.join(writer.staging_root, f"p{partition:05d}-a0-t{partition}")
        data = f"shard of partition {partition}".encode()
        storage.write_atomic(storage.join(staging, "000000.tar"), data)
        key = f"{partition:05d}"
        rows = task_rows(pa.array([key]), 0, [0], [len(data)], [0])
        sink = io.BytesIO()
        write_task_run(rows, sink)
        storage.write_atomic(storage.join(staging, STAGED_INDEX_NAME), sink.getvalue())
        info = ShardInfo(0, 1, len(data), crc32c_text(data), key, key)
        messages.append(
            WebDatasetCommitMessage(partition, 0, partition, staging, [info], storage.join(staging, STAGED_INDEX_NAME))
        )
    return writer, messages


def shards_on_disk(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("shard-*.tar"))}


@pytest.mark.parametrize("threads", [1, 8])
def test_parallel_renames_commit_what_one_by_one_does(tmp_path, monkeypatch, threads) -> None:
    monkeypatch.setattr(LocalStorage, "concurrent_requests", threads)
    writer, messages = staged_write(tmp_path)
    manifest = commit_job(writer.commit_request(messages))
    on_disk = shards_on_disk(tmp_path)
    assert [s.name for s in manifest.shards] == [f"shard-{i:06d}.tar" for i in range(SHARDS)]
    assert on_disk == {f"shard-{i:06d}.tar": f"shard of partition {i}".encode() for i in range(SHARDS)}
    assert Manifest.from_json((tmp_path / "_manifest.json").read_bytes()).shards == manifest.shards
    assert not (tmp_path / "_staging").exists() and journal_job(Version.at(str(tmp_path))) is None


class FailingRename(LocalStorage):
    """A fake used only to inject a fault the real storage cannot be made to produce on demand:
    its Nth rename raises (the others are real), like a storage error half-way through."""

    def __init__(self, fail_at: int) -> None:
        self.fail_at = fail_at
        self.calls = 0
        self.lock = threading.Lock()

    def rename_new(self, source: str, target: str) -> None:
        with self.lock:
            self.calls += 1
            failing = self.calls == self.fail_at
        if failing:
            raise OSError("injected: the storage failed this rename")
        super().rename_new(source, target)


def test_a_rename_failing_half_way_stops_the_commit_and_the_journal_finishes_it(tmp_path, monkeypatch) -> None:
    writer, messages = staged_write(tmp_path)
    faulty = FailingRename(fail_at=SHARDS // 2)
    faulty.concurrent_requests = 8
    monkeypatch.setattr("spark_webdataset.dataset.layout.storage_for", lambda uri: faulty)
    with pytest.raises(OSError, match="injected"):
        commit_job(writer.commit_request(messages))
    done = len(shards_on_disk(tmp_path))
    assert SHARDS // 2 - 1 <= done < SHARDS  # it stopped submitting (those in flight finished)
    assert not (tmp_path / "_manifest.json").exists()  # the manifest comes only after every rename
    version = Version.at(str(tmp_path))
    assert journal_job(version) == writer.job_id  # decided: kept for the next committer

    monkeypatch.undo()
    with CommitLock(version, "next") as lock:
        assert roll_forward(version, lock) is True
    manifest = Manifest.from_json((tmp_path / "_manifest.json").read_bytes())
    assert [s.name for s in manifest.shards] == [f"shard-{i:06d}.tar" for i in range(SHARDS)]
    assert shards_on_disk(tmp_path) == {f"shard-{i:06d}.tar": f"shard of partition {i}".encode() for i in range(SHARDS)}
    assert journal_job(version) is None and not (tmp_path / "_staging").exists()


def test_the_pool_size_is_one_place_per_storage() -> None:
    from spark_webdataset.storage.gcs import HTTP_POOL_CONNECTIONS, GCSStorage

    assert LocalStorage.concurrent_requests == 1  # measured: threads only add GIL contention to os.replace
    assert GCSStorage.concurrent_requests == 16 <= HTTP_POOL_CONNECTIONS
