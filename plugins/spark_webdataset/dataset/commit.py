"""The driver's commit: the only step that decides what becomes final.

Under the version's commit lock it (1) settles a journal left by an
earlier commit (finishes it, or discards it if it was planned against a
manifest that is no longer there), (2) refuses a sealed or published
version, (3) merges the tasks' sample index rows and the version's index
into the next index, proving the new keys unique among themselves and
against the version's, (4) on gs:// checks every staged shard's server crc32c
against its task's, (5) claims the version's one journal slot create-only
with a journal naming every rename, the new manifest and the digest of the
manifest it was planned against, then (6) applies it: leftovers go, shards
get their final names, the manifest is replaced by compare-and-swap.

Fencing: a committer frozen past its lease (GC pause, stopped VM) must
not change what another committed. The lease check before every step
(`CommitLock.check`) stops it at its next step; what it could still do
between a check and one write is harmless by construction:
- the journal slot is create-only, and a journal applies only while the
  manifest is the one it was planned against (or its own): one planned
  against an older manifest is stale and is discarded, never applied;
- shards and sample indexes get their names create-only (`rename_new`), so no
  rename ever replaces a committed object;
- deletions are conditional on the identity of the object listed (a GCS
  generation, a local inode), listed after a lease check;
- the manifest changes only by compare-and-swap, also in roll forward.
A committer that finds its commit finished by another's roll forward
reports success. An overwrite removes the manifest before its renames,
so readers see the old set, the new set, or "not committed", never a mix.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import hashlib
import itertools
import json
import logging
import os
import shutil
import tempfile
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, Sequence

from .changes import APPEND, DELETE, ChangePlan, plan_change, rewrite_shards, unique_keys
from .lock import DEFAULT_LEASE_SECONDS, CommitLock
from ..errors import (
    ChecksumMismatch,
    ConcurrentCommit,
    DuplicateKey,
    FieldMismatch,
    LostCommitLock,
    NoSampleIndex,
    NotCommitted,
    PreconditionFailed,
)
from ..format.keys import first_duplicate_in_blocks, merge_blocks
from ..format.manifest import Manifest, ShardEntry
from .layout import (
    Version,
    _normalized,
    is_shard_name,
    sample_index_path,
    shard_number,
    sample_index_serial,
    shard_name,
    staged_sample_index_name,
    staged_shard_name,
)
from ..format.shard_writer import ShardInfo
from ..testing import faults
from .staging import remove_staging

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)
JOURNAL_KIND = "spark-webdataset-commit-journal-v2"
LEGACY_JOURNAL_KIND = "spark-webdataset-commit-journal-v1"  # no base digest: applied as before


def _task_keys(version: Version, path: str) -> "pa.Array":
    """A task's keys, from its index rows."""
    import pyarrow as pa

    with version.storage.open_read(path) as stream:
        table = pa.ipc.open_stream(stream).read_all()
    return table.column(0).combine_chunks()


def _task_index_rows(version: Version, path: str, names: list[str]) -> Iterator["pa.RecordBatch"]:
    """A task's sorted index rows, its shard numbers turned into the shards' final names."""
    import pyarrow as pa

    from ..format.sample_index import MERGE_SCHEMA, named_rows

    shard_names = pa.array(names, pa.string())
    with version.storage.open_read(path) as stream:
        for batch in pa.ipc.open_stream(stream):
            yield named_rows(batch, shard_names).cast(MERGE_SCHEMA)


def _version_index_rows(version: Version, path: str, parent: str | None = None) -> Iterator["pa.RecordBatch"]:
    """A version's index rows; read from a `parent`, its own shards' locations become references."""
    import pyarrow.compute as pc

    from ..format.sample_index import MERGE_SCHEMA, index_block_rows

    with version.storage.open_read(path) as stream:
        for batch in index_block_rows(stream):
            batch = batch.cast(MERGE_SCHEMA)
            if parent is not None:
                shards = batch.column(1)
                own = pc.invert(pc.starts_with(shards, "../"))
                referenced = pc.if_else(own, pc.binary_join_element_wise(f"../{parent}/", shards, ""), shards)
                batch = batch.set_column(1, "shard", referenced)
            yield batch


def _digest(data: bytes | None) -> str | None:
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
    def from_json(cls, data: bytes) -> "Journal":
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
        return [shard for shard in Manifest.from_json(self.manifest).own_shards if shard.name in targets]


class JournalState(enum.Enum):
    PENDING = "pending"  # the manifest is the one it was planned against: apply it
    LANDED = "landed"  # its manifest is in place, or later commits built on it
    STALE = "stale"  # planned against a manifest that is gone: never apply it


def journal_state(journal: Journal, current: bytes | None) -> JournalState:
    digest = _digest(current)
    if digest == _digest(journal.manifest):
        return JournalState.LANDED
    if journal.legacy or digest == journal.base:
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
            "webdataset: discarding the journal of job %s in %s: %s", journal.job_id, version.uri,
            "the version is sealed" if state is JournalState.PENDING else "it was planned against another manifest",
        )
        storage.delete_if(version.journal_uri, token)
        return False
    log.warning("webdataset: finishing the interrupted commit of job %s in %s", journal.job_id, version.uri)
    _apply(version, journal, token, lock)
    # Its job lost the lock we hold: what its staging still holds goes too.
    storage.delete_tree(storage.join(version.staging_uri, journal.job_id))
    storage.remove_empty_dir(version.staging_uri)
    return True


def journal_job(version: Version) -> str | None:
    """The job whose decided commit is pending in this version, if any."""
    data, _ = version.storage.read_versioned(version.journal_uri)
    return None if data is None else Journal.from_json(data).job_id


def _apply(version: Version, journal: Journal, token: object, lock: CommitLock) -> None:
    """Apply a claimed journal (`token`: the journal object's); ConcurrentCommit if it is stale."""
    storage = version.storage
    current, manifest_token = version.read_manifest_bytes()
    state = journal_state(journal, current)
    if state is JournalState.STALE:
        storage.delete_if(version.journal_uri, token)
        raise ConcurrentCommit(
            f"{version.uri}: the manifest changed after job {journal.job_id} planned its commit; nothing of it was applied"
        )
    if state is JournalState.PENDING:
        lock.check()
        if journal.overwrite and current is not None:
            # From here until the new manifest lands the directory is "not committed".
            if not storage.delete_if(version.manifest_uri, manifest_token):
                raise ConcurrentCommit(f"{version.uri}: the manifest changed during the commit")
        _sweep(version, journal, lock)
        _rename_all(version, journal, lock)
        faults.point("commit:renamed")
        lock.check()
        _swap_manifest(version, journal)
    faults.point("commit:manifest-written")
    storage.delete_if(version.journal_uri, token)


def _swap_manifest(version: Version, journal: Journal) -> None:
    """The journal's manifest in place of the one it was planned against, by compare-and-swap."""
    storage = version.storage
    current, token = version.read_manifest_bytes()
    state = journal_state(journal, current)
    if state is JournalState.PENDING:
        faults.point("commit:swapping")  # a test moves the manifest here: the swap below must lose
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


def _sweep(version: Version, journal: Journal, lock: CommitLock) -> None:
    """Remove what the journal's manifest will not list: shards an overwrite replaces, leftovers of
    commits that never finished, key runs no longer needed. Each object goes only if it is still
    the one listed (after a lease check), so a committer that froze here removes nothing newer."""
    storage = version.storage
    manifest = Manifest.from_json(journal.manifest)
    listed = {shard.name for shard in manifest.own_shards}  # a referenced shard's name protects nothing here
    keep = manifest.sample_index.rsplit("/", 1)[-1] if manifest.sample_index else None
    lock.check()
    for directory, unlisted in (
        (version.uri, lambda name: is_shard_name(name) and name not in listed),
        (version.sample_index_dir_uri, lambda name: name != keep),
    ):
        for name, identity in storage.identities(directory).items():
            if unlisted(name):
                lock.check()
                storage.delete_if_identity(storage.join(directory, name), identity)


def _rename_one(version: Version, journal: Journal, staged: str, final: str, lock: CommitLock) -> None:
    """Give one staged file its final name, create-only; done already (source gone, target there) is fine."""
    storage = version.storage
    source, target = version.path(staged), version.path(final)
    lock.check()
    for _attempt in range(2):
        try:
            storage.rename_new(source, target)  # the common case costs no existence check
            faults.point("commit:renamed-one")
            return
        except PreconditionFailed:
            pass  # the name is taken: see by what, below
        except Exception:
            if storage.exists(source):
                raise
            if not storage.exists(target):
                raise NotCommitted(
                    f"{version.uri}: cannot finish the commit of job {journal.job_id}: {staged} is gone"
                ) from None
            return  # renamed already: by a commit that died after this rename (roll forward), or a retry
        if not storage.exists(source):
            return  # another committer finishing this journal renamed it
        if storage.same_object(source, target):
            storage.delete(source)  # a copy that landed (ours retried, or another finisher's)
            return
        # A leftover of a commit that never finished holds the name: no manifest lists it.
        lock.check()
        directory, _, name = target.rpartition("/")
        identity = storage.identities(directory).get(name)
        if identity is not None:
            log.warning("webdataset: removing %s, a leftover of an unfinished commit, to commit job %s", target, journal.job_id)
            storage.delete_if_identity(target, identity)
    raise ConcurrentCommit(f"{version.uri}: {final} is taken by another commit; job {journal.job_id} cannot name its shard")


def _rename_all(version: Version, journal: Journal, lock: CommitLock) -> None:
    """Every rename of the journal, `storage.rename_threads` at a time (a rename on gs:// is a
    server-side rewrite and a delete: latency, not bandwidth). The calling thread renews the lock
    as renames finish; the first failure stops submitting, lets those in flight end, and is
    raised: the journal stays, and the next committer finishes what is left."""
    renames = journal.renames
    threads = max(1, min(version.storage.rename_threads, len(renames)))
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


def _settle(pending: set["Future[None]"], lock: CommitLock) -> set["Future[None]"]:
    """Wait for at least one rename to end; raise the first failure; renew the lease."""
    done, rest = wait(pending, return_when=FIRST_COMPLETED)
    for future in done:
        future.result()
    lock.renew()
    return rest


@dataclass(frozen=True)
class StreamBatch:
    """One micro-batch of a streaming query: the manifest records, per checkpoint, the last
    batch committed, so a batch that Spark replays after a restart commits nothing twice.
    Checkpoint locations are compared normalized: file:///x, /x and /x/ are one stream."""

    checkpoint: str
    batch_id: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "checkpoint", _normalized(self.checkpoint))

    def committed_in(self, manifest: Manifest) -> bool:
        recorded = manifest.run.get(STREAMS_KEY, {})
        last = max(
            (int(batch) for location, batch in recorded.items() if _normalized(location) == self.checkpoint),
            default=None,
        )
        return last is not None and last >= self.batch_id


STREAMS_KEY = "streams"  # manifest run section: {checkpoint location: last committed batch id}


class StagedAttempt(Protocol):
    """What one successful task attempt staged (the Spark writer's commit message is one)."""

    partition: int
    staging: str  # its directory; its shard n is `layout.staged_shard_name(n)` in it
    shards: list[ShardInfo]
    index_path: str | None  # its sample index rows, sorted by key (format.sample_index.TASK_SCHEMA)
    keys_ascending: bool
    deleted_rows: int  # a delete's task: the rows it got


@dataclass(frozen=True)
class CommitRequest:
    """What a job asks the commit to make final: a plain value, built by the batch and stream writers."""

    version_uri: str
    job_id: str
    overwrite: bool
    fields: list[dict[str, Any]]  # name and Spark type, column order
    options: dict[str, Any]  # what shaped the bytes: recorded in the manifest
    attempts: Sequence[StagedAttempt]
    application_id: str | None = None
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    stream: StreamBatch | None = None
    parent: str | None = None  # a published version of the same root to build on (its shards referenced)
    change: str = APPEND  # what the tasks' rows do to the base: changes.APPEND, UPSERT or DELETE

    @property
    def version(self) -> Version:
        return Version.at(self.version_uri)

    @property
    def staging_root(self) -> str:
        """Every attempt of this job stages below here."""
        version = self.version
        return version.storage.join(version.staging_uri, self.job_id)


def commit_job(request: CommitRequest) -> Manifest | None:
    """Make the tasks' staged shards final, or raise with nothing of them visible; the version's
    manifest after the commit (None: a stream's empty first batch left no manifest)."""
    version = request.version
    storage = version.storage
    messages = sorted(request.attempts, key=lambda m: m.partition)
    stream = request.stream
    journal: Journal | None = None
    try:
        with CommitLock(version, request.job_id, lease_seconds=request.lease_seconds) as lock:
            roll_forward(version, lock)
            version.check_writable()
            manifest_bytes, _ = version.read_manifest_bytes()
            faults.point("commit:manifest-read")
            existing = None if request.overwrite or manifest_bytes is None else Manifest.from_json(manifest_bytes)
            base, base_index = _base(version, request, existing)
            if stream is not None and existing is not None and stream.committed_in(existing):
                log.warning(
                    "webdataset: batch %d of the stream checkpointed at %s is in %s already "
                    "(replayed after a restart): its output is dropped",
                    stream.batch_id, stream.checkpoint, version.uri,
                )
                _remove_staging(request)
                return existing
            if stream is not None and not any(message.shards for message in messages):
                _remove_staging(request)
                return existing  # an empty micro-batch: nothing to name, nothing to record
            deleting = request.change == DELETE
            if not deleting and base is not None and [f["name"] for f in base.fields] != [f["name"] for f in request.fields]:
                raise FieldMismatch(
                    f"append to {version.uri}: the DataFrame's fields {[f['name'] for f in request.fields]} differ "
                    f"from the {'version' if base is existing else 'parent version'}'s {[f['name'] for f in base.fields]}"
                )
            names = _shard_names(messages, base)
            change = None
            if request.change != APPEND and base is not None:
                keys, given = unique_keys(_task_keys(version, m.index_path) for m in messages if m.index_path)
                if deleting:
                    given = sum(m.deleted_rows for m in messages)  # a delete's task keeps each key once
                first = _first_free_number(base) + sum(len(shard_names) for shard_names in names)
                change = plan_change(request.change, keys, given, base, base_index, version, first, request.staging_root)
                lock.check()
            rewritten = rewrite_shards(version, change, storage.rename_threads, lock.renew) if change else {}
            index = _merge_index(version, request, messages, names, base, base_index, existing, change)
            lock.renew()
            planned = _plan(
                version, request, messages, names, base, index, base=_digest(manifest_bytes), change=change, rewritten=rewritten
            )
            _check_uploads(version, messages, planned)
            lock.check()
            faults.point("commit:planned")
            try:
                storage.create_only(version.journal_uri, planned.to_json())
            except PreconditionFailed:
                raise ConcurrentCommit(
                    f"{version.uri}: another commit ({journal_job(version)}) decided first; write again"
                ) from None
            journal = planned
            _, token = storage.read_versioned(version.journal_uri)
            faults.point("commit:journal-written")
            try:
                lock.check()
                version.check_writable()  # a publisher may have sealed it since (its seal, then our journal)
            except BaseException:
                # Decided: the next holder of the lock finishes it, unless the version was sealed
                # meanwhile, where it is a stray that must not stay in a published directory.
                if version.is_sealed():
                    storage.delete_if(version.journal_uri, token)
                raise
            _apply(version, journal, token, lock)
    except BaseException as error:
        landed = journal is not None and isinstance(error, LostCommitLock) and _landed(version, journal)
        # A decided commit that failed half-way keeps its staged files: the next committer finishes it.
        if not landed and (journal is None or journal_job(version) != request.job_id):
            _remove_staging(request)
        if not landed:
            raise
        log.warning("webdataset: lost the commit lock of %s, but another committer finished job %s", version.uri, request.job_id)
    _remove_staging(request)
    assert journal is not None
    manifest = Manifest.from_json(journal.manifest)
    log.info(
        "webdataset: committed %d shards, %d samples, %d bytes to %s",
        len(manifest.shards),
        manifest.samples,
        manifest.bytes,
        version.uri,
    )
    return manifest


def _landed(version: Version, journal: Journal) -> bool:
    """Another committer finished this journal (roll forward) after we lost the lock."""
    current, _ = version.read_manifest_bytes()
    return journal_state(journal, current) is JournalState.LANDED


def _remove_staging(request: CommitRequest) -> None:
    """The job's staging, and each message's directory by name: a stream's tasks stage under the
    job of the writer Spark pickled for them, not under the committing writer's (what is left
    after the renames, or all of a batch that was dropped or refused)."""
    version = request.version
    own = request.staging_root.rstrip("/") + "/"
    for attempt in request.attempts:
        if not attempt.staging.startswith(own):
            version.storage.delete_tree(attempt.staging)
    remove_staging(version, request.job_id)


def _first_free_number(base: Manifest | None) -> int:
    """The first shard number that names no shard of the base: after its count and after every
    number its shards use, own or referenced (a rewrite or an emptied shard leaves numbers out of
    the count; one version never lists two shards of one name, which tools that cache shards by
    name would confuse)."""
    if base is None:
        return 0
    used = [shard_number(shard.name) for shard in base.shards]
    return max([len(base.shards), *(number + 1 for number in used if number is not None)])


def _shard_names(messages: list[StagedAttempt], existing: Manifest | None) -> list[list[str]]:
    """The final names of each attempt's shards: contiguous after the version's, in partition order."""
    at = _first_free_number(existing)
    names = []
    for message in messages:
        names.append([shard_name(at + number) for number in range(len(message.shards))])
        at += len(message.shards)
    return names


IndexRows = Callable[[], Iterator["pa.RecordBatch"]]


def _base(version: Version, request: CommitRequest, existing: Manifest | None) -> tuple[Manifest | None, IndexRows | None]:
    """What the commit builds on: the version's manifest (an append), or its parent's with every
    shard a reference (a new version with a parent); and how to read that manifest's index rows
    (a change reads them more than once)."""
    if request.parent is None or (existing is not None and existing.parent == request.parent):
        if existing is None or not existing.shards:
            return existing, None
        if not existing.sample_index:
            raise NoSampleIndex(
                f"{version.uri} was written before spark-webdataset kept a sample index: appending to it "
                "cannot prove the new keys unique; write it again (mode overwrite) or into a new version"
            )
        index_path = version.path(existing.sample_index)
        return existing, lambda: _version_index_rows(version, index_path)
    if existing is not None:
        raise ConcurrentCommit(
            f"{version.uri} is built on {existing.parent or 'no parent'}; a write built on {request.parent} "
            "cannot append to it (write a new version, or overwrite this one)"
        )
    if version.dataset is None:
        raise NotCommitted(f"{version.uri}: a version with a parent must be ROOT/versions/ID of a dataset root")
    parent_version, parent = version.dataset.published(request.parent)
    if parent.shards and not parent.sample_index:
        raise NoSampleIndex(f"{parent_version.uri} has no sample index: a child version cannot prove its keys new")
    referenced = dataclasses.replace(
        parent, shards=[shard.referenced_from(request.parent) for shard in parent.shards], run={}
    )
    if not parent.shards:
        return referenced, None
    parent_index = parent_version.path(parent.sample_index)
    return referenced, lambda: _version_index_rows(parent_version, parent_index, parent=request.parent)


def _merge_index(
    version: Version,
    request: CommitRequest,
    messages: list[StagedAttempt],
    names: list[list[str]],
    base: Manifest | None,
    base_index: IndexRows | None,
    existing: Manifest | None,
    change: ChangePlan | None = None,
) -> tuple[str, int]:
    """Merge the tasks' sorted index rows (and the index of what the commit builds on) into the next
    index, staged in the job's directory; raise on a duplicate key. (its staged path, its size)"""
    from ..format.sample_index import write_index

    sources: list[Iterator["pa.RecordBatch"]] = []
    owners: list[str] = []
    if base_index is not None and base is not None:
        sources.append(change.base_rows(base_index()) if change else base_index())
        owners.append(f"the {'version' if base is existing else 'parent version'}'s {len(base.shards)} committed shard(s)")
    for message, shard_names in zip(messages, names):
        if message.index_path and request.change != DELETE:  # a delete's rows are keys to remove
            sources.append(_task_index_rows(version, message.index_path, shard_names))
            owners.append(f"partition {message.partition}")
    serial = sample_index_serial(existing.sample_index) + 1 if existing and existing.sample_index else 0
    staged = version.storage.join(request.staging_root, staged_sample_index_name(serial))

    def merged() -> Iterator["pa.RecordBatch"]:
        runs = _started_together(sources, version.storage.rename_threads)
        for rows, found in first_duplicate_in_blocks(merge_blocks(runs)):
            if found:
                key, first, second = found
                raise DuplicateKey(
                    f"duplicate sample key {key!r} in {owners[first]} and {owners[second]} of {version.uri}: "
                    "a key may appear only once in a version"
                )
            yield rows

    with tempfile.TemporaryDirectory(prefix="webdataset-index-") as scratch:
        local = os.path.join(scratch, "index.parquet")
        write_index(merged(), local)
        with open(local, "rb") as source, version.storage.open_write(staged) as target:
            shutil.copyfileobj(source, target, 8 << 20)
        return staged, os.path.getsize(local)


def _started_together(runs: list[Iterator["pa.RecordBatch"]], threads: int) -> list[Iterator["pa.RecordBatch"]]:
    """Each run opened and its first block read, `threads` at a time: the merge needs every
    run's first block before its first round, and on gs:// each costs round trips (memory is
    the same: one block per run)."""
    if threads <= 1 or len(runs) <= 1:
        return runs

    def start(run: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        first = next(run, None)
        return iter(()) if first is None else itertools.chain([first], run)

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="webdataset-keys") as pool:
        return list(pool.map(start, runs))


def _plan(
    version: Version,
    request: CommitRequest,
    messages: list[StagedAttempt],
    names: list[list[str]],
    existing: Manifest | None,
    index: tuple[str, int],
    base: str | None,
    change: ChangePlan | None = None,
    rewritten: dict[str, ShardEntry] | None = None,
) -> Journal:
    stream = request.stream
    kept = list(existing.shards) if existing else []  # the version's, or the parent's as references
    renames: list[tuple[str, str]] = []
    if change is not None and existing is not None:
        kept = change.entries(existing, rewritten or {})
        renames += [(_relative(version, rewrite.staged), rewrite.name) for rewrite in change.rewrites]
    entries: list[ShardEntry] = []
    for message, shard_names in zip(messages, names):
        for shard, name in zip(message.shards, shard_names):
            renames.append((_relative(version, version.storage.join(message.staging, staged_shard_name(shard.sequence))), name))
            entries.append(ShardEntry.written(shard, name, message.keys_ascending))
    staged_index, index_bytes = index
    sample_index = sample_index_path(sample_index_serial(staged_index))
    renames.append((_relative(version, staged_index), sample_index))
    previous_run = dict(existing.run) if existing else {}
    streams = dict(previous_run.get(STREAMS_KEY, {}))
    if stream is not None:
        streams[stream.checkpoint] = stream.batch_id
    deleting = request.change == DELETE and existing is not None
    manifest = Manifest(
        shards=kept + entries,
        fields=existing.fields if deleting and existing else request.fields,  # a delete reads keys alone
        options=existing.options if deleting and existing else request.options,
        sample_index=sample_index,
        sample_index_bytes=index_bytes,
        parent=request.parent if request.parent is not None else (existing.parent if existing else None),
        run={
            "spark_application_id": request.application_id,
            "job_id": request.job_id,
            "mode": "overwrite" if request.overwrite else "append",
            "commits": int(previous_run.get("commits", 0)) + 1,
            "committed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "oversize_samples": list(previous_run.get("oversize_samples", []))
            + [shard.first_key for message in messages for shard in message.shards if shard.oversize],
            **({STREAMS_KEY: streams} if streams else {}),
            **_change_record(previous_run, change, entries),
        },
    )
    return Journal(request.job_id, request.overwrite, renames, manifest.to_json(), base)


def _change_record(previous_run: dict[str, Any], change: ChangePlan | None, entries: list[ShardEntry]) -> dict[str, Any]:
    """The run section's `change` (this commit's) and `changes` (every change commit of the version,
    in order: a day's upsert and delete may be two commits of one version)."""
    if change is None:
        return {key: previous_run[key] for key in ("change", "changes") if key in previous_run}
    replaced = len(change.removed_keys) if change.kind != DELETE else 0
    summary = change.summary(sum(entry.samples for entry in entries) - replaced)
    return {"change": summary, "changes": [*previous_run.get("changes", []), summary]}


def _check_uploads(version: Version, messages: list[StagedAttempt], journal: Journal) -> None:
    """End-to-end integrity at the cost of one listing per job directory the tasks staged in: every
    staged shard's server-side crc32c (gs://) must be the crc32c its task computed over the bytes it
    wrote. A mismatch fails the commit before anything is decided; the staged files go with the job."""
    storage = version.storage
    # a batch write's tasks stage below the writer's job; a stream's below the job of the writer
    # Spark pickled for its tasks, which is not the committing one
    roots = sorted({message.staging.rsplit("/", 1)[0] for message in messages})
    if not roots and any(final != Manifest.from_json(journal.manifest).sample_index for _, final in journal.renames):
        roots = [version.storage.join(version.staging_uri, journal.job_id)]  # only rewrites were staged
    stored: dict[str, str | None] = {}
    for root in roots:
        below = storage.crc32c_below(root)
        if below is None:
            return  # local files: the server keeps no checksum, and reading them again is validation's job
        stored.update({f"{root.rstrip('/')}/{relative}": crc for relative, crc in below.items()})
    written = {shard.name: shard.crc32c for shard in Manifest.from_json(journal.manifest).shards}
    for staged, final in journal.renames:
        if final not in written:
            continue  # the sample index: not a shard
        path = version.path(staged)
        server = stored.get(path)
        if server != written[final]:
            raise ChecksumMismatch(
                f"{version.uri}: shard {final} (staged as {path}) has crc32c {server} on the server, but the "
                f"task computed {written[final]} over the bytes it wrote: the upload is corrupt; write again"
            )


def _relative(version: Version, path: str) -> str:
    prefix = version.uri.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise ValueError(f"{path} is not inside {version.uri}")
    return path[len(prefix) :]
