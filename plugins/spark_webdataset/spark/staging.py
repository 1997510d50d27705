"""Per-job staging: a lease per job, and removal of only what is provably dead.

Each job stages under `_staging/<job>/` and writes a lease there when it
starts; its tasks keep writing under it. A job removes its own staging
(commit, abort) and another job's only when nothing under it changed for
`STALE_STAGING_SECONDS` (a job that died), or it has no lease and nothing
changed for `ORPHAN_SECONDS` (files that an aborted job's late sibling
tasks wrote after its last sweep). A live job's staging is never touched.
"""

from __future__ import annotations

import json
import logging
import socket
import time

from ..layout import Version

log = logging.getLogger(__name__)

LEASE_NAME = "_lease.json"
STALE_STAGING_SECONDS = 24 * 3600.0
ORPHAN_SECONDS = 600.0


def write_lease(version: Version, job_id: str) -> None:
    storage = version.storage
    lease = {"job_id": job_id, "host": socket.gethostname(), "started_at": time.time()}
    storage.write_atomic(storage.join(version.staging_uri, job_id, LEASE_NAME), json.dumps(lease).encode())


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
        newest = storage.newest_modification(directory)
        has_lease = storage.exists(storage.join(directory, LEASE_NAME))
        idle = now - newest if newest is not None else float("inf")
        if idle > STALE_STAGING_SECONDS or (not has_lease and idle > ORPHAN_SECONDS):
            log.warning("webdataset: removing the staging of dead job %s (idle %.0f s) in %s", job_id, idle, version.uri)
            storage.delete_tree(directory)
            removed.append(job_id)
    storage.remove_empty_dir(version.staging_uri)
    return removed
