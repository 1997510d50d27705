"""Storage edges both backends must get right, on local storage (real files, tmp_path): missing
objects, stale tokens, recursive times. The same on gs://: tests/integration/test_storage_edges.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

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
    with pytest.raises(UnsupportedScheme, match="unsupported URI scheme 'az'"):
        storage_for("az://bucket/ds")


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


def test_local_storage_keeps_no_server_crc32c(tmp_path: Path) -> None:
    storage = LocalStorage()
    storage.write_atomic(str(tmp_path / "job" / "a.tar"), b"a")
    assert storage.crc32c_below(str(tmp_path / "job")) is None  # the commit's upload check is skipped


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
