"""One committer at a time per version: a leased lock object beside the manifest.

Commits and publish's seal take it, so two appends never pick the same
shard names and a seal never lands in the middle of a commit. The lock is
an object created create-only (GCS `ifGenerationMatch=0`, locally
`os.link`) holding its owner and an expiry; the holder renews it while it
works, and a holder that died is overtaken by compare-and-swap once its
lease expired.

The lease fences nothing by itself (a holder frozen past it does not know
it): the commit checks it before every step (`check`), and its steps are
ordered and conditional so that a holder that lost the lock between a
check and its next write can still change nothing another committer owns
(see dataset/commit.py).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time

from ..errors import ConcurrentCommit, LostCommitLock, PreconditionFailed
from .layout import Version

log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 120.0
DEFAULT_WAIT_SECONDS = 900.0
POLL_SECONDS = 0.5


class CommitLock:
    def __init__(
        self,
        version: Version,
        owner: str,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> None:
        self.version = version
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.wait_seconds = wait_seconds
        self._token: object = None
        self._renewed = 0.0
        self._renewing = threading.Lock()

    def _body(self) -> bytes:
        now = time.time()
        return json.dumps(
            {
                "owner": self.owner,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "renewed_at": now,
                "expires_at": now + self.lease_seconds,
            }
        ).encode()

    def acquire(self) -> CommitLock:
        storage, path = self.version.storage, self.version.lock_uri
        deadline = time.monotonic() + self.wait_seconds
        while True:
            data, token = storage.read_versioned(path)
            if data is None:
                try:
                    storage.create_only(path, self._body())
                except PreconditionFailed:
                    continue
                self._claimed()
                return self
            holder = json.loads(data)
            if holder.get("owner") == self.owner or holder.get("expires_at", 0) < time.time():
                if storage.replace_if(path, self._body(), token):
                    if holder.get("owner") != self.owner:
                        log.warning(
                            "webdataset: took over the expired commit lock of %s on %s", holder, self.version.uri
                        )
                    self._claimed()
                    return self
                continue
            if time.monotonic() > deadline:
                raise ConcurrentCommit(
                    f"{self.version.uri}: another commit ({holder.get('owner')} on {holder.get('host')}) holds the "
                    f"commit lock; waited {self.wait_seconds:.0f} s"
                )
            time.sleep(POLL_SECONDS)

    def _claimed(self) -> None:
        _, self._token = self.version.storage.read_versioned(self.version.lock_uri)
        self._renewed = time.monotonic()

    def check(self) -> None:
        """Raise LostCommitLock unless this holder still owns the lock. Free while the holder's own
        clock says less than half a lease passed since it last proved ownership (nobody can take a
        lock before its lease expires); after that, a renewal by compare-and-swap proves it. A
        holder frozen past its lease (GC pause, stopped VM) always pays the round trip, and fails."""
        if self._token is None:
            raise LostCommitLock(f"{self.version.uri}: the commit lock is not held")
        if time.monotonic() - self._renewed < self.lease_seconds / 2:
            return
        self._renew_if_older(self.lease_seconds / 2)

    def renew(self, force: bool = False) -> None:
        """Extend the lease (cheap to call often: it writes at most every third of a lease)."""
        self._renew_if_older(0.0 if force else self.lease_seconds / 3)

    def _renew_if_older(self, age: float) -> None:
        # One renewal at a time: the commit's rename threads check the lease concurrently, and a
        # second compare-and-swap with the token the first one replaced would read as a takeover.
        with self._renewing:
            if self._token is None:
                raise LostCommitLock(f"{self.version.uri}: the commit lock is not held")
            if age and time.monotonic() - self._renewed < age:
                return  # another thread renewed it meanwhile
            storage, path = self.version.storage, self.version.lock_uri
            if not storage.replace_if(path, self._body(), self._token):
                self._token = None
                raise LostCommitLock(f"{self.version.uri}: lost the commit lock (its lease expired and was taken over)")
            self._claimed()

    def release(self) -> None:
        if self._token is not None:
            self.version.storage.delete_if(self.version.lock_uri, self._token)
            self._token = None

    def __enter__(self) -> CommitLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
