"""Rules issue 29 added, each where a one-line bug in it went unseen by the rest of the suite
(issue 29's mutation table re-run: the mutation each test catches is named above it). Real parts
on local disk, without Spark; the Spark reader's: tests/integration/test_mutations_more.py.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import spark_webdataset
from spark_webdataset.dataset.layout import Dataset, Version
from spark_webdataset.dataset.paths import MAX_NAME_BYTES
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import InputError, InvalidVersionId
from spark_webdataset.format.verify import MAX_ERRORS_PER_SHARD
from spark_webdataset.storage import LocalStorage
from tests.support.fenced_committer import commit_samples, keys
from tests.support.webdataset_ui_data import commit_table

# dataset/paths.py normalize_uri: `if length > MAX_NAME_BYTES` -> `if length >= MAX_NAME_BYTES`


def test_a_path_part_of_exactly_the_longest_name_is_a_place_a_version_is_written_and_read(tmp_path: Path) -> None:
    root = tmp_path / ("r" * MAX_NAME_BYTES)  # NAME_MAX: a name Linux accepts
    uri = Dataset(str(root)).version("v1").uri
    commit_samples(uri, "a", 12)
    assert sorted(spark_webdataset.open(uri).keys()) == keys("a", 12)
    with pytest.raises(InputError, match="path part of 256 bytes"):
        Dataset(str(tmp_path / ("r" * (MAX_NAME_BYTES + 1))))


# dataset/paths.py normalize_place: `if len(parts) >= 2 and parts[-2] == VERSIONS_DIR` -> `len(parts) > 2`


@pytest.mark.parametrize("name", [".hidden", "２０２６", "v1а", "-v"])
def test_a_relative_versions_directory_is_checked_as_a_version_id(tmp_path: Path, monkeypatch, name: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidVersionId, match="version id"):
        Version.at(f"versions/{name}")
    assert list(tmp_path.iterdir()) == []


# format/verify.py ShardReport.error: `if len(self.errors) < MAX_ERRORS_PER_SHARD` -> `<=`


def test_a_shard_report_lists_exactly_the_first_max_errors_and_counts_them_all(tmp_path: Path) -> None:
    samples = MAX_ERRORS_PER_SHARD + 7
    table = pa.table({"id": list(range(samples)), "txt": [b"x"] * samples})
    version = commit_table(tmp_path / "root", "v1", table, fields=[("txt", "txt", "binary")], max_shard_bytes=1 << 20)
    report = validate_version(str(version), workers=1, require=["jpg"])
    assert not report.ok and report.error_count == samples  # one missing field per sample, one shard
    assert len(report.errors) == MAX_ERRORS_PER_SHARD
    assert [error["key"] for error in report.errors] == [f"{i:05d}" for i in range(MAX_ERRORS_PER_SHARD)]


# storage/local.py _locked: `if _same_file(lock.fileno(), lock_path):` -> `if True:`


def _waiting_on(inode: int, deadline: float) -> None:
    """Until a flock waiter on `inode` shows in /proc/locks (a blocked lock is listed with '->')."""
    while time.monotonic() < deadline:
        for line in Path("/proc/locks").read_text().splitlines():
            if "->" in line and any(part.endswith(f":{inode}") for part in line.split()):
                return
    raise AssertionError(f"no locker came to wait on inode {inode}")


def test_a_locker_that_waited_on_a_lock_file_since_removed_locks_the_one_at_the_path(tmp_path: Path) -> None:
    """`remove_empty_dir` removes the lock file of an object that is gone (holding its lock); a
    writer that opened that file before and waited for it must not count as holding the lock."""
    storage = LocalStorage()
    path = str(tmp_path / "_manifest.json")
    lock_path = tmp_path / "._manifest.json.lock"
    held = open(lock_path, "a+b")
    fcntl.flock(held, fcntl.LOCK_EX)
    inside, leave = threading.Event(), threading.Event()

    def writer() -> None:
        with storage._locked(path):
            inside.set()
            leave.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        _waiting_on(os.fstat(held.fileno()).st_ino, time.monotonic() + 30)
        os.unlink(lock_path)  # as `_remove_lock_file` does, holding the lock
        held.close()
        assert inside.wait(30)
        with open(lock_path, "a+b") as other:  # another writer, now
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        leave.set()
        thread.join(30)


# dataset/paths.py normalize_uri: `(part == "." and (anchor or position > 0))` -> `(part == "." and anchor)`


@pytest.mark.parametrize("uri", ["ds/./versions/v1", "ds/versions/./v1", "./ds/./versions/v1"])
def test_a_relative_path_with_a_dot_part_past_its_start_is_refused(tmp_path: Path, monkeypatch, uri: str) -> None:
    monkeypatch.chdir(tmp_path)
    for call in (lambda: Version.at(uri), lambda: Dataset(uri)):
        with pytest.raises(InputError, match="'.' path part"):
            call()
    assert Version.at("./ds/versions/v1").id == "v1"  # a leading "./" is the one allowed
    assert list(tmp_path.iterdir()) == []
