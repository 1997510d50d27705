"""Storage edges on gs:// against the session's real GCS API (fake-gcs-server): missing objects,
conditional deletes and writes, recursive times, server crc32c. Local storage: tests/unit/storage/.
"""

from __future__ import annotations

import time

import pytest

from spark_webdataset.errors import StorageError
from spark_webdataset.storage import storage_for
from tests.support.helpers import crc32c_text


def test_gcs_missing_objects_read_as_errors_and_delete_as_no_ops(bucket: str) -> None:
    storage = storage_for(bucket)
    path = storage.join(bucket, "versions", "v1", "_manifest.json")
    with pytest.raises(StorageError, match=f"{path}: no such object"):
        storage.open_read(path)
    storage.delete(path)
    assert storage.read_versioned(path) == (None, 0)
    assert storage.delete_if(path, 0) is False  # nothing there to delete


def test_gcs_delete_if_deletes_the_generation_it_read(bucket: str) -> None:
    # (A stale generation cannot be tested here: fake-gcs-server ignores ifGenerationMatch on DELETE.)
    storage = storage_for(bucket)
    path = storage.join(bucket, "ds", "_commit.lock")
    storage.create_only(path, b"mine")
    _, current = storage.read_versioned(path)
    assert storage.delete_if(path, current) is True
    assert not storage.exists(path)
    assert storage.delete_if(path, current) is False  # a retried delete finds it gone


def test_gcs_newest_modification_is_recursive_and_empty_dirs_are_nothing(bucket: str) -> None:
    storage = storage_for(bucket)
    job = storage.join(bucket, "v1", "_staging", "job-1")
    assert storage.newest_modification(job) is None
    before = time.time()
    storage.write_atomic(storage.join(job, "a.tar"), b"a")
    storage.write_atomic(storage.join(job, "attempt-0", "b.tar"), b"b")
    storage.write_atomic(storage.join(bucket, "v1", "_staging", "job-10", "c.tar"), b"c")  # a sibling, not below
    newest = storage.newest_modification(job)
    assert newest is not None and before - 5 <= newest <= time.time() + 5
    storage.remove_empty_dir(job)  # object stores have no directories: the objects stay
    assert storage.list_sizes(job) == {"a.tar": 1}
    assert storage.list_dirs(job) == ["attempt-0"]


def test_gcs_conditional_writes_into_a_missing_bucket_raise_not_a_precondition(gcs_emulator) -> None:
    """Only a 412 means 'someone else wrote it'; any other failure must surface, not read as lost races."""
    from google.api_core import exceptions

    from spark_webdataset.errors import PreconditionFailed

    storage = storage_for("gs://no-such-bucket-here")
    with pytest.raises(exceptions.NotFound) as error:
        storage.create_only("gs://no-such-bucket-here/ds/_published/v1.json", b"{}")
    assert not isinstance(error.value, PreconditionFailed)


def test_gcs_crc32c_below_is_the_servers_by_relative_path_and_delete_tree_takes_only_below(bucket: str) -> None:
    storage = storage_for(bucket)
    job = storage.join(bucket, "v1", "_staging", "job-1")
    files = {"a.tar": b"a" * 1000, "attempt-0/b.tar": b"b", "attempt-0/keys.arrow": b""}
    for name, data in files.items():
        storage.write_atomic(storage.join(job, name), data)
    sibling = storage.join(bucket, "v1", "_staging", "job-10", "c.tar")  # shares the prefix, not below
    storage.write_atomic(sibling, b"c")
    assert storage.crc32c_below(job) == {name: crc32c_text(data) for name, data in files.items()}
    storage.delete_tree(job)  # several deletes at once
    assert storage.crc32c_below(job) == {}
    assert storage.exists(sibling)
