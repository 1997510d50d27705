"""Storage edges both backends must get right: missing objects, stale tokens, recursive times.

Local storage on real files (tmp_path); gs:// against the session's real
GCS API (fake-gcs-server). No Spark.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from helpers import crc32c_text

from spark_webdataset.errors import StorageError, UnsupportedScheme
from spark_webdataset.storage import LocalStorage, storage_for
from spark_webdataset.storage.gcs import split

# -- local -----------------------------------------------------------------------------------------


def test_reading_a_missing_file_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "versions" / "v1" / "_manifest.json"
    with pytest.raises(StorageError, match=f"{missing}: no such file"):
        LocalStorage().open_read(str(missing))


def test_file_uris_and_plain_paths_are_the_same_files(tmp_path: Path) -> None:
    storage = storage_for(f"file://{tmp_path}")
    storage.write_atomic(f"file://{tmp_path}/a/b.json", b"{}")
    assert (tmp_path / "a" / "b.json").read_bytes() == b"{}"
    assert storage.list_sizes(str(tmp_path / "a")) == {"b.json": 2}
    with pytest.raises(UnsupportedScheme, match="unsupported URI scheme 's3'"):
        storage_for("s3://bucket/ds")


def test_deleting_a_missing_file_is_fine(tmp_path: Path) -> None:
    storage = LocalStorage()
    path = str(tmp_path / "gone.tar")
    storage.delete(path)
    storage.write_atomic(path, b"x")
    storage.delete(path)
    storage.delete(path)
    assert not storage.exists(path)


def test_newest_modification_is_the_newest_below_the_directory(tmp_path: Path) -> None:
    """Staging cleanup judges a job dead by this: every file at any depth counts, a dangling link does not."""
    storage = LocalStorage()
    assert storage.newest_modification(str(tmp_path / "nothing")) is None
    (tmp_path / "job" / "deep" / "er").mkdir(parents=True)
    old, new = time.time() - 3600, time.time() - 60
    for path in [tmp_path / "job" / "a.tar", tmp_path / "job" / "deep" / "er" / "b.tar"]:
        path.write_bytes(b"x")
    os.symlink(tmp_path / "nowhere", tmp_path / "job" / "deep" / "dangling")
    for directory, _, files in os.walk(tmp_path / "job"):
        for name in files:
            if not os.path.islink(os.path.join(directory, name)):
                os.utime(os.path.join(directory, name), (old, old))
        os.utime(directory, (old, old))
    assert storage.newest_modification(str(tmp_path / "job")) == pytest.approx(old)
    os.utime(tmp_path / "job" / "deep" / "er" / "b.tar", (new, new))
    assert storage.newest_modification(str(tmp_path / "job")) == pytest.approx(new)


def test_stale_tokens_neither_replace_nor_delete(tmp_path: Path) -> None:
    """Compare-and-swap: a token from before someone else's write loses, even for the same bytes."""
    storage = LocalStorage()
    path = str(tmp_path / "LATEST")
    storage.write_atomic(path, b"v1\n")
    _, token = storage.read_versioned(path)
    storage.write_atomic(path, b"v1\n")  # rewritten with the same bytes: a new file
    assert storage.replace_if(path, b"v2\n", token) is False
    assert storage.delete_if(path, token) is False
    assert storage.read_bytes(path) == b"v1\n"
    _, fresh = storage.read_versioned(path)
    assert storage.delete_if(path, fresh) is True
    assert storage.read_versioned(path) == (None, None)


# -- gs:// -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("uri, message", [("/local/path", "not a gs:// URI"), ("gs:///object", "no bucket")])
def test_malformed_gcs_uris_are_named(uri: str, message: str) -> None:
    with pytest.raises(StorageError, match=f"{uri}: {message}"):
        split(uri)


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
    storage.write_atomic(
        storage.join(bucket, "v1", "_staging", "job-10", "c.tar"), b"c"
    )  # a sibling, not below
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


def test_local_storage_keeps_no_server_crc32c(tmp_path: Path) -> None:
    storage = LocalStorage()
    storage.write_atomic(str(tmp_path / "job" / "a.tar"), b"a")
    assert storage.crc32c_below(str(tmp_path / "job")) is None  # the commit's upload check is skipped


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


def test_files_land_while_another_job_removes_the_empty_parent(tmp_path: Path) -> None:
    """The race two overlapping writers ran into: one job's `remove_empty_dir(_staging)` between
    another's mkdir of `_staging/` and of `_staging/<job>/` (seen as a writer failing to start).
    A real thread removes the empty parent every millisecond while files are created below it."""
    import threading

    storage = LocalStorage()
    parent = tmp_path / "_staging"
    stop = threading.Event()

    def remove_empty_parent() -> None:
        while not stop.is_set():
            storage.remove_empty_dir(str(parent))
            time.sleep(0.001)

    remover = threading.Thread(target=remove_empty_parent)
    remover.start()
    try:
        for number in range(400):
            job = parent / f"job{number}"
            storage.write_atomic(str(job / "_lease.json"), b"{}")
            with storage.open_write(str(job / "p0" / "000000.tar")) as stream:
                stream.write(b"x")
            storage.rename_new(str(job / "p0" / "000000.tar"), str(job / "final" / "shard.tar"))
            assert (job / "final" / "shard.tar").read_bytes() == b"x"
            storage.delete_tree(str(job))
    finally:
        stop.set()
        remover.join()
