"""The commit journal: what a decided commit does, written create-only before it is applied.

A journal names every rename (staged path -> final name), the new manifest and the digest of
the manifest it was planned against. Applying it twice does it once, and any committer that
holds the lock finishes one left behind (roll forward), unless it is stale: planned against a
manifest that is gone (its committer froze past its lease and another committed since). How the
steps stay harmless under a frozen committer is in `dataset/commit.py`'s docstring.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import json
import logging
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import cached_property

from .. import fault_points
from ..errors import ConcurrentCommit, NotCommitted, PreconditionFailed
from ..format.manifest import Manifest, ShardEntry
from .layout import Version
from .lock import CommitLock
from .tree import is_shard_name

log = logging.getLogger(__name__)
JOURNAL_KIND = "spark-webdataset-commit-journal-v2"
LEGACY_JOURNAL_KIND = "spark-webdataset-commit-journal-v1"  # no base digest: applied as before


def digest(data: bytes | None) -> str | None:
    """A manifest's identity in a journal: its sha256 (None: no manifest)."""
    return None if data is None else hashlib.sha256(data).hexdigest()


@dataclass
class Journal:
    """What a decided commit does; applying it twice does it once."""

    job_id: str
    overwrite: bool
    renames: list[tuple[str, str]]  # staged path -> final name, relative to the version directory
    manifest: bytes
    base: str | None = None  # sha256 of the manifest it was planned against; None: there was none
    legacy: bool = False  # a v1 journal (no base): trusted, as v1 committers did

    @classmethod
    def planned(
        cls, job_id: str, overwrite: bool, renames: list[tuple[str, str]], manifest: Manifest, base: str | None
    ) -> Journal:
        """A commit's journal from its plan: the manifest serialised once, and kept as the value it is."""
        journal = cls(job_id, overwrite, renames, manifest.to_json(), base)
        journal.parsed_manifest = manifest
        return journal

    @cached_property
    def parsed_manifest(self) -> Manifest:
        """The manifest this journal puts in place (parsed once per journal)."""
        return Manifest.from_json(self.manifest)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "__kind__": JOURNAL_KIND,
                "job_id": self.job_id,
                "overwrite": self.overwrite,
                "base": self.base,
                "renames": self.renames,
                "manifest": base64.b64encode(self.manifest).decode(),
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Journal:
        document = json.loads(data)
        return cls(
            job_id=document["job_id"],
            overwrite=document["overwrite"],
            renames=[tuple(pair) for pair in document["renames"]],  # type: ignore[misc]
            manifest=base64.b64decode(document["manifest"]),
            base=document.get("base"),
            legacy=document.get("__kind__") == LEGACY_JOURNAL_KIND,
        )

    def new_shards(self) -> list[ShardEntry]:
        """The manifest entries of the shards this journal renames into place."""
        targets = {final for _, final in self.renames}
        return [shard for shard in self.parsed_manifest.own_shards if shard.name in targets]


class JournalState(enum.Enum):
    PENDING = "pending"  # the manifest is the one it was planned against: apply it
    LANDED = "landed"  # its manifest is in place, or later commits built on it
    STALE = "stale"  # planned against a manifest that is gone: never apply it


def journal_state(journal: Journal, current: bytes | None) -> JournalState:
    current_digest = digest(current)
    if current_digest == digest(journal.manifest):
        return JournalState.LANDED
    if journal.legacy or current_digest == journal.base:
        return JournalState.PENDING
    if current is None and journal.overwrite and journal.base is not None:
        return JournalState.PENDING  # its own first step removed the manifest it replaces
    if current is not None and _built_on(Manifest.from_json(current), journal):
        return JournalState.LANDED
    return JournalState.STALE


def _built_on(current: Manifest, journal: Journal) -> bool:
    """The current manifest holds every shard the journal committed (later commits appended to it)."""
    new = journal.new_shards()
    if not new:
        return current.run.get("job_id") == journal.job_id
    listed = set(current.shards)
    return all(shard in listed for shard in new)


def roll_forward(version: Version, lock: CommitLock) -> bool:
    """Settle a journal an earlier commit left: finish it if it still applies (True), discard it
    if it is stale or the version is sealed (a stray of a committer that lost its lock)."""
    storage = version.storage
    data, token = storage.read_versioned(version.journal_uri)
    if data is None:
        return False
    journal = Journal.from_json(data)
    current, _ = version.read_manifest_bytes()
    state = journal_state(journal, current)
    if state is JournalState.STALE or (state is JournalState.PENDING and version.is_sealed()):
        log.warning(
            "webdataset: discarding the journal of job %s in %s: %s",
            journal.job_id,
            version.uri,
            "the version is sealed" if state is JournalState.PENDING else "it was planned against another manifest",
        )
        storage.delete_if(version.journal_uri, token)
        return False
    log.warning("webdataset: finishing the interrupted commit of job %s in %s", journal.job_id, version.uri)
    apply(version, journal, token, lock)
    # Its job lost the lock we hold: what its staging still holds goes too.
    storage.delete_tree(storage.join(version.staging_uri, journal.job_id))
    storage.remove_empty_dir(version.staging_uri)
    return True


def journal_job(version: Version) -> str | None:
    """The job whose decided commit is pending in this version, if any."""
    data, _ = version.storage.read_versioned(version.journal_uri)
    return None if data is None else Journal.from_json(data).job_id


def apply(version: Version, journal: Journal, token: object, lock: CommitLock) -> None:
    """Apply a claimed journal (`token`: the journal object's); ConcurrentCommit if it is stale."""
    storage = version.storage
    current, manifest_token = version.read_manifest_bytes()
    state = journal_state(journal, current)
    if state is JournalState.STALE:
        storage.delete_if(version.journal_uri, token)
        raise ConcurrentCommit(
            f"{version.uri}: the manifest changed after job {journal.job_id} planned its commit; nothing of it was applied"
        )
    listing = None
    if state is JournalState.PENDING:
        lock.check()
        if journal.overwrite and current is not None:
            # From here until the new manifest lands the directory is "not committed".
            if not storage.delete_if(version.manifest_uri, manifest_token):
                raise ConcurrentCommit(f"{version.uri}: the manifest changed during the commit")
        listing = _sweep(version, journal, lock)
        rename_all(version, journal, lock)
        fault_points.point("commit:renamed")
        lock.check()
        _swap_manifest(version, journal)
    fault_points.point("commit:manifest-written")
    # What the manifest no longer lists (a shard a change rewrote, the previous sample index)
    # goes once no manifest in place lists it: readers of the old manifest kept it until the swap.
    # The directories are listed once a commit: what this second pass may remove was there
    # before the renames (they add only files the new manifest lists).
    _sweep(version, journal, lock, listing)
    storage.delete_if(version.journal_uri, token)


def _swap_manifest(version: Version, journal: Journal) -> None:
    """The journal's manifest in place of the one it was planned against, by compare-and-swap."""
    storage = version.storage
    current, token = version.read_manifest_bytes()
    state = journal_state(journal, current)
    if state is JournalState.PENDING:
        fault_points.point("commit:swapping")  # a test moves the manifest here: the swap below must lose
        if current is None:
            try:
                storage.create_only(version.manifest_uri, journal.manifest)
                return
            except PreconditionFailed:
                pass
        elif storage.replace_if(version.manifest_uri, journal.manifest, token):
            return
        current, _ = version.read_manifest_bytes()
        state = journal_state(journal, current)
    if state is not JournalState.LANDED:
        raise ConcurrentCommit(f"{version.uri}: the manifest changed during the commit of job {journal.job_id}")


Listing = list[tuple[str, dict[str, object]]]  # (directory, its files' identities), as a sweep found them


def _sweep(version: Version, journal: Journal, lock: CommitLock, found: Listing | None = None) -> Listing:
    """Remove what neither the journal's manifest nor the manifest in place lists: shards an
    overwrite replaces (its manifest is gone by then), leftovers of commits that never finished,
    key runs no longer needed. A committed shard (one the manifest in place lists) is never
    removed; each object goes only if it is still the one listed (after a lease check), so a
    committer that froze here removes nothing newer. `found`: an earlier sweep's listing of this
    commit, instead of listing again; returns what is left of the listing (for a later pass)."""
    storage = version.storage
    manifest = journal.parsed_manifest
    listed = {shard.name for shard in manifest.own_shards}  # a referenced shard's name protects nothing here
    keep = {manifest.sample_index.rsplit("/", 1)[-1]} if manifest.sample_index else set()
    lock.check()
    if found is None:
        found = [
            (directory, storage.identities(directory)) for directory in (version.uri, version.sample_index_dir_uri)
        ]
    committed, committed_index = _in_place(version)
    listed |= committed
    keep |= committed_index
    left: Listing = []
    for (directory, identities), unlisted in zip(
        found, (lambda name: is_shard_name(name) and name not in listed, lambda name: name not in keep)
    ):
        rest = dict(identities)
        for name, identity in identities.items():
            if unlisted(name):
                lock.check()
                fault_points.point("commit:sweeping", file=name)  # a test replaces the object here: it must stay
                storage.delete_if_identity(storage.join(directory, name), identity)
                del rest[name]  # removed, or no longer the object listed: never tried again
        left.append((directory, rest))
    return left


def _in_place(version: Version) -> tuple[set[str], set[str]]:
    """The own shards and the sample index file the manifest in place lists (none without one)."""
    current, _ = version.read_manifest_bytes()
    if current is None:
        return set(), set()
    manifest = Manifest.from_json(current)
    index = {manifest.sample_index.rsplit("/", 1)[-1]} if manifest.sample_index else set()
    return {shard.name for shard in manifest.own_shards}, index


def _rename_one(version: Version, journal: Journal, staged: str, final: str, lock: CommitLock) -> None:
    """Give one staged file its final name, create-only; done already (source gone, target there) is fine."""
    storage = version.storage
    source, target = version.path(staged), version.path(final)
    lock.check()
    for _attempt in range(2):
        try:
            storage.rename_new(source, target)  # the common case costs no existence check
            fault_points.point("commit:renamed-one")
            return
        except PreconditionFailed:
            pass  # the name is taken: see by what, below
        except Exception:
            if storage.exists(source):
                raise
            if not storage.exists(target):
                # A rename in flight when its committer froze: the one that took the lock over finished
                # the journal and a later commit may have replaced the file since; that is not ours to judge.
                lock.check()
                raise NotCommitted(
                    f"{version.uri}: cannot finish the commit of job {journal.job_id}: {staged} is gone"
                ) from None
            return  # renamed already: by a commit that died after this rename (roll forward), or a retry
        if not storage.exists(source):
            return  # another committer finishing this journal renamed it
        if storage.same_object(source, target):
            storage.delete(source)  # a copy that landed (ours retried, or another finisher's)
            return
        # The name is held by a leftover of a commit that never finished, or by a shard of the
        # manifest this overwrite removed; never by a committed shard (one the manifest in place lists).
        lock.check()
        directory, _, name = target.rpartition("/")
        identity = storage.identities(directory).get(name)
        if name in _in_place(version)[0]:
            raise ConcurrentCommit(
                f"{version.uri}: {final} is a committed shard of the manifest in place; job {journal.job_id} "
                "was planned against another manifest and cannot name its shard"
            )
        if identity is not None:
            log.warning(
                "webdataset: removing %s (no manifest in place lists it: a leftover of an unfinished commit, or a "
                "shard the overwrite replaces) to commit job %s", target, journal.job_id,
            )  # fmt: skip
            storage.delete_if_identity(target, identity)
    raise ConcurrentCommit(
        f"{version.uri}: {final} is taken by another commit; job {journal.job_id} cannot name its shard"
    )


def rename_all(version: Version, journal: Journal, lock: CommitLock) -> None:
    """Every rename of the journal, `storage.concurrent_requests` at a time (a rename on gs:// is a
    server-side rewrite and a delete: latency, not bandwidth). The calling thread renews the lock
    as renames finish; the first failure stops submitting, lets those in flight end, and is
    raised: the journal stays, and the next committer finishes what is left."""
    renames = journal.renames
    threads = max(1, min(version.storage.concurrent_requests, len(renames)))
    if threads == 1:
        for staged, final in renames:
            _rename_one(version, journal, staged, final, lock)
            lock.renew()
        return
    window = 4 * threads  # submitted but not finished: bounded, so a failure stops the rest quickly
    pending: set[Future[None]] = set()
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="webdataset-rename") as pool:
        try:
            for staged, final in renames:
                if len(pending) >= window:
                    pending = _settle(pending, lock)
                pending.add(pool.submit(_rename_one, version, journal, staged, final, lock))
            while pending:
                pending = _settle(pending, lock)
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _settle(pending: set[Future[None]], lock: CommitLock) -> set[Future[None]]:
    """Wait for at least one rename to end; raise the first failure; renew the lease."""
    done, rest = wait(pending, return_when=FIRST_COMPLETED)
    for future in done:
        future.result()
    lock.renew()
    return rest


def has_landed(version: Version, journal: Journal) -> bool:
    """Another committer finished this journal (roll forward) after its own committer lost the lock."""
    current, _ = version.read_manifest_bytes()
    return journal_state(journal, current) is JournalState.LANDED
