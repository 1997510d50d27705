"""Per-job staging: a lease per job, and removal of only what is provably dead.

Each job stages under `_staging/<job>/` and writes a lease there when it
starts, naming its host and its Spark driver's process (the JVM that
launched the writer's Python worker). A job removes its own staging
(commit, abort) and another job's only when that job is provably dead:
its driver ran on this host and is gone, or its lease says it was
aborted, or nothing under its staging changed for `STALE_STAGING_SECONDS`,
or it has no lease and nothing changed for `ORPHAN_SECONDS`. A live job's
staging is never touched.

A failed job leaves nothing, whatever the timing: `abort()` first marks
the job's lease aborted (or, in a directory the job created, removes the
directory's writer mark and the lease with it), then removes what is
staged. A task checks the job (`job_ended`) before it stages each file and
after its last one, and removes what it staged when the job ended: a
sibling task whose files land after the abort's sweep removes them itself,
and a file of a task killed before its check is dead staging at once for
the next writer (its lease says aborted).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time

from .layout import Version
from .tree import LEASE_NAME

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


def _read_lease(version: Version, job_id: str) -> dict | None:
    """The job's lease (None: it has none; a damaged one reads as a lease that proves nothing)."""
    storage = version.storage
    data, _ = storage.read_versioned(storage.join(version.staging_uri, job_id, LEASE_NAME))
    if data is None:
        return None
    try:
        lease = json.loads(data)
    except ValueError:
        return {}
    return lease if isinstance(lease, dict) else {}


def mark_aborted(version: Version, job_id: str) -> None:
    """The job failed: from now on its tasks remove what they stage, and its staging is dead."""
    storage = version.storage
    lease = _read_lease(version, job_id) or {"job_id": job_id}
    lease.update({"aborted": True, "aborted_at": time.time()})
    storage.write_atomic(storage.join(version.staging_uri, job_id, LEASE_NAME), json.dumps(lease).encode())


def job_ended(version: Version, job_id: str) -> bool:
    """A task's check before and after it stages: the job was aborted (its lease says so, or the
    job removed the directory it created: no lease and no writer mark). A job whose lease is gone
    but whose directory keeps our mark may still be staging (a stream's next micro-batch)."""
    lease = _read_lease(version, job_id)
    if lease is not None:
        return bool(lease.get("aborted"))
    return not version.storage.exists(version.mark_uri)


def remove_task_staging(version: Version, job_id: str, staging: str) -> None:
    """A task's own staged files, and the directories above them left empty (in a directory its
    aborted job created, the version directory too: a failed job leaves nothing)."""
    storage = version.storage
    storage.delete_tree(staging)
    storage.remove_empty_dir(storage.join(version.staging_uri, job_id))
    storage.remove_empty_dir(version.staging_uri)
    if not storage.exists(version.mark_uri):
        storage.remove_empty_dir(version.uri)


def remove_staged_files(version: Version, job_id: str) -> None:
    """Everything the job staged but its lease (which says it was aborted)."""
    storage = version.storage
    directory = storage.join(version.staging_uri, job_id)
    for name in storage.list_dirs(directory):
        storage.delete_tree(storage.join(directory, name))
    for name in storage.list_sizes(directory):
        if name != LEASE_NAME:
            storage.delete(storage.join(directory, name))


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
    lease = _read_lease(version, job_id)
    idle = now - newest if newest is not None else float("inf")
    dead = (
        idle > STALE_STAGING_SECONDS
        or (lease is None and idle > ORPHAN_SECONDS)
        or (lease is not None and (bool(lease.get("aborted")) or _driver_gone(lease)))
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
            log.warning(
                "webdataset: removing the staging of dead job %s (idle %.0f s) in %s", job_id, idle, version.uri
            )
            storage.delete_tree(directory)
            removed.append(job_id)
    storage.remove_empty_dir(version.staging_uri)
    return removed
