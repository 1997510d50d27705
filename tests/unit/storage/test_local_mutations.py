"""Rules of storage/local.py that issue 29 added, each where a one-line bug in it went unseen by the rest of
the suite (issue 29's mutation table re-run: the mutation each test catches is named above it). Real
parts on local disk, without Spark; the Spark reader's: tests/integration/test_mutations_more.py.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from spark_webdataset.storage import LocalStorage

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
