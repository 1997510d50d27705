"""On s3:// the commit checks each staged shard's server-side crc32c (kept by the server from the
upload's x-amz-checksum-crc32c, read back by HEAD) against the one its task computed, as on gs://."""

from __future__ import annotations

import threading
import time

import pytest

from spark_webdataset import fault_points as faults
from spark_webdataset.dataset.tree import STAGED_INDEX_NAME
from spark_webdataset.errors import ChecksumMismatch, from_spark
from spark_webdataset.storage import storage_for
from tests.integration.test_checksums import write

pytestmark = pytest.mark.slow


def test_on_s3_a_commit_fails_when_the_server_crc32c_differs_naming_the_shard(spark, s3_bucket) -> None:
    # A real fault on the real S3 server: once the task has staged its shard (its index run, written
    # after the shard is closed, is there), the staged object is replaced by bytes with one byte
    # flipped while the commit waits under its lock (fault point commit:manifest-read sleeps).
    version = f"{s3_bucket}/data/versions/v1"
    staging = f"{version}/_staging"
    storage = storage_for(version)
    done = threading.Event()
    corrupted: list[str] = []

    def corrupt_the_staged_shard() -> None:
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            names = set(storage.crc32c_below(staging) or {}) if storage.list_dirs(version) else set()
            done_tasks = sorted(n for n in names if n.endswith("/" + STAGED_INDEX_NAME))
            staged = [f"{staging}/{n[: -len(STAGED_INDEX_NAME)]}000000.tar" for n in done_tasks]
            if staged:
                data = bytearray(storage.read_bytes(staged[0]))
                data[512 + 100] ^= 0xFF
                storage.write_atomic(staged[0], bytes(data))
                corrupted.append(staged[0])
                return
            time.sleep(0.05)

    thread = threading.Thread(target=corrupt_the_staged_shard, daemon=True)
    thread.start()
    try:
        with pytest.raises(Exception) as caught:
            with faults.installed({"commit:manifest-read": {"action": "sleep", "seconds": 4}}):
                write(spark, version, partitions=1, maxShardBytes="1MiB")
    finally:
        done.set()
        thread.join(30)
    assert corrupted, "the staged shard was never found"
    typed = from_spark(caught.value)
    assert isinstance(typed, ChecksumMismatch), caught.value
    assert "shard-000000.tar" in str(typed) and "crc32c" in str(typed)
    left = storage.list_sizes(version)
    assert "_manifest.json" not in left and "shard-000000.tar" not in left
    assert not [
        name for name in storage.crc32c_below(version) or {} if name.startswith("_staging/") and name.endswith(".tar")
    ]
