"""Another job's staging goes only when that job is provably dead; a live job's is never touched.

Real processes stand in for drivers: this test process (alive) and a child that has exited (dead).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from spark_webdataset.dataset.layout import Version
from spark_webdataset.dataset.staging import (
    LEASE_NAME,
    ORPHAN_SECONDS,
    STALE_STAGING_SECONDS,
    _proc_stat,
    clean_dead_staging,
    driver_process,
    write_lease,
)


def staged_job(version: Version, job_id: str, lease: dict | None) -> Path:
    directory = Path(version.staging_uri) / job_id
    (directory / "p00000-a0-t1").mkdir(parents=True)
    (directory / "p00000-a0-t1" / "000000.tar").write_bytes(b"\0" * 1024)
    if lease is not None:
        (directory / LEASE_NAME).write_text(json.dumps(lease))
    return directory


def lease_of(pid: int, started: int | None, host: str | None = None) -> dict:
    return {"job_id": "x", "host": host or socket.gethostname(), "driver_pid": pid, "driver_started": started}


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_job_whose_driver_exited_is_removed_and_a_live_one_is_kept(tmp_path) -> None:
    version = Version.at(str(tmp_path))
    me = _proc_stat(os.getpid())
    assert me is not None
    live = staged_job(version, "live", lease_of(os.getpid(), me[2]))
    dead = staged_job(version, "dead", lease_of(dead_pid(), 12345))
    reused = staged_job(version, "reused", lease_of(os.getpid(), me[2] - 1))  # same pid, another process
    own = staged_job(version, "own", None)
    an_hour_later = time.time() + 3600
    assert sorted(clean_dead_staging(version, "own", now=an_hour_later)) == ["dead", "reused"]
    assert live.exists() and own.exists() and not dead.exists() and not reused.exists()


def test_other_hosts_wait_for_the_stale_limit_and_leaseless_staging_for_the_orphan_limit(tmp_path) -> None:
    version = Version.at(str(tmp_path))
    remote = staged_job(version, "remote", lease_of(1, 1, host="another-host"))
    orphan = staged_job(version, "orphan", None)
    now = time.time()
    assert clean_dead_staging(version, "me", now=now + 60) == []  # recent: both kept
    assert clean_dead_staging(version, "me", now=now + ORPHAN_SECONDS + 60) == ["orphan"]
    assert remote.exists() and not orphan.exists()
    assert clean_dead_staging(version, "me", now=now + STALE_STAGING_SECONDS + 60) == ["remote"]
    assert not Path(version.staging_uri).exists()  # the empty _staging/ goes too


def test_outside_spark_there_is_no_driver_and_the_lease_says_so(tmp_path) -> None:
    """pytest runs under no JVM: the walk up the process tree ends without finding one."""
    assert driver_process() is None
    version = Version.at(str(tmp_path))
    write_lease(version, "job")
    lease = json.loads((Path(version.staging_uri) / "job" / LEASE_NAME).read_text())
    assert lease["host"] == socket.gethostname() and lease["driver_pid"] is None
    # a lease without a driver is never "gone": only the stale limit removes it
    assert clean_dead_staging(version, "other", now=time.time() + 3600) == []
