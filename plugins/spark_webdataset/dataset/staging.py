"""Per-job staging: a lease per job, and removal of only what is provably dead.

Each job stages under `_staging/<job>/` and writes a lease there when it
starts, naming its host and its Spark driver's process (the JVM that
launched the writer's Python worker). A job removes its own staging
(commit, abort) and another job's only when that job is provably dead:
its driver ran on this host and is gone, or nothing under its staging
changed for `STALE_STAGING_SECONDS`, or it has no lease and nothing
changed for `ORPHAN_SECONDS` (files that an aborted job's late sibling
tasks wrote after its last sweep). A live job's staging is never touched.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time

from .layout import LEASE_NAME, Version

log = logging.getLogger(__name__)

STALE_STAGING_SECONDS = 24 * 3600.0
ORPHAN_SECONDS = 600.0


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(command, parent pid, start time in clock ticks) from Linux's /proc; None elsewhere or if gone."""
    try:
        with open(f"/proc/{pid}/stat") as stream:
            text = stream.read()
    except OSError:
        return None
    command = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return command, int(fields[1]), int(fields[19])


def driver_process() -> tuple[int, int] | None:
    """(pid, start time) of the JVM above this Python worker, if we can see it."""
    pid = os.getppid()
    for _ in range(8):
        stat = _proc_stat(pid)
        if stat is None:
            return None
        command, parent, started = stat
        if command == "java":
            return pid, started
        if parent <= 1:
            return None
        pid = parent
    return None


def write_lease(version: Version, job_id: str) -> None:
    storage = version.storage
    driver = driver_process()
    lease = {
        "job_id": job_id,
        "host": socket.gethostname(),
        "driver_pid": driver[0] if driver else None,
        "driver_started": driver[1] if driver else None,
        "started_at": time.time(),
    }
    storage.write_atomic(storage.join(version.staging_uri, job_id, LEASE_NAME), json.dumps(lease).encode())


def _driver_gone(lease: dict) -> bool:
    """True only when the lease's driver ran on this host and that process no longer exists."""
    if lease.get("host") != socket.gethostname() or not lease.get("driver_pid"):
        return False
    stat = _proc_stat(int(lease["driver_pid"]))
    return stat is None or stat[2] != lease.get("driver_started")


def _job_dead(version: Version, job_id: str, now: float) -> tuple[bool, float]:
    """Whether the job staging under `_staging/<job_id>/` is provably dead (the module's rule), and how long it idled."""
    storage = version.storage
    directory = storage.join(version.staging_uri, job_id)
    newest = storage.newest_modification(directory)
    lease_path = storage.join(directory, LEASE_NAME)
    lease = json.loads(storage.read_bytes(lease_path) or b"{}") if storage.exists(lease_path) else None
    idle = now - newest if newest is not None else float("inf")
    dead = (
        idle > STALE_STAGING_SECONDS
        or (lease is None and idle > ORPHAN_SECONDS)
        or (lease is not None and _driver_gone(lease))
    )
    return dead, idle


def live_jobs(version: Version, now: float | None = None) -> list[str]:
    """Jobs whose staging in `version` is not provably dead: gc leaves such a version alone."""
    now = time.time() if now is None else now
    return [job for job in version.storage.list_dirs(version.staging_uri) if not _job_dead(version, job, now)[0]]


def remove_staging(version: Version, job_id: str) -> None:
    storage = version.storage
    storage.delete_tree(storage.join(version.staging_uri, job_id))
    storage.remove_empty_dir(version.staging_uri)


def clean_dead_staging(version: Version, own_job_id: str, now: float | None = None) -> list[str]:
    """Remove the staging of jobs that are provably dead; return their ids."""
    storage = version.storage
    now = time.time() if now is None else now
    removed = []
    for job_id in storage.list_dirs(version.staging_uri):
        if job_id == own_job_id:
            continue
        directory = storage.join(version.staging_uri, job_id)
        dead, idle = _job_dead(version, job_id, now)
        if dead:
            log.warning("webdataset: removing the staging of dead job %s (idle %.0f s) in %s", job_id, idle, version.uri)
            storage.delete_tree(directory)
            removed.append(job_id)
    storage.remove_empty_dir(version.staging_uri)
    return removed
