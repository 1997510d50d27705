"""The driver's commit: the only step that decides what becomes final.

Under the version's commit lock it (1) settles a journal left by an
earlier commit (finishes it, or discards it if it was planned against a
manifest that is no longer there), (2) refuses a sealed or published
version, and an overwrite, upsert or delete whose base (the manifest its
writer read on the driver) is no longer the version's (`ConcurrentCommit`:
it would silently undo a commit it never saw; an append rebases), (3) merges the tasks' sample index rows and the version's index
into the next index, proving the new keys unique among themselves and
against the version's, (4) on gs:// checks every staged shard's server crc32c
against its task's, (5) claims the version's one journal slot create-only
with a journal naming every rename, the new manifest and the digest of the
manifest it was planned against, then (6) applies it: leftovers go, shards
get their final names, the manifest is replaced by compare-and-swap, then
what it no longer lists goes (never a shard the manifest in place lists).

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

Here: the request, the plan and the order of the steps. The journal and how it is applied
(renames, sweep, manifest swap, roll forward) are in `journal.py`; the index merge of (3) in
`index_merge.py`; a change's plan and rewrites in `changes.py`.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .. import fault_points
from ..errors import (
    ChecksumMismatch,
    ConcurrentCommit,
    FieldMismatch,
    LostCommitLock,
    NoSampleIndex,
    NotCommitted,
    PreconditionFailed,
)
from ..format.checksums import SHA256
from ..format.manifest import IndexLayer, Manifest, ShardEntry
from ..format.shard_writer import ShardInfo
from .changes import APPEND, DELETE, ChangePlan, plan_change, rewrite_shards, unique_keys
from .index_layers import IndexPart, file_rows, fold_count, index_parts, locations
from .index_merge import BaseIndex, base_part_rows, layer_rows_near, merge_index, task_index_rows, task_keys
from .journal import Journal, JournalState, apply, digest, has_landed, journal_job, journal_state, roll_forward
from .layout import Version
from .lock import DEFAULT_LEASE_SECONDS, CommitLock
from .paths import _normalized
from .staging import remove_staging
from .tree import (
    sample_index_path,
    sample_index_serial,
    shard_name,
    shard_number,
    staged_sample_index_name,
    staged_shard_name,
)

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class Base:
    """The version's manifest as a job read it before its tasks ran (the writer reads it on the
    driver): an overwrite, upsert or delete planned against it replaces or rewrites what it saw,
    so it commits only while the manifest is still this one."""

    digest: str | None  # sha256 of the manifest; None: the version had none

    @classmethod
    def read(cls, version: Version) -> Base:
        data, _ = version.read_manifest_bytes()
        return cls(digest(data))


class StagedAttempt(Protocol):
    """What one successful task attempt staged (the Spark writer's commit message is one)."""

    partition: int
    staging: str  # its directory; its shard n is `tree.staged_shard_name(n)` in it
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
    # The manifest the job planned against; None: not recorded, the manifest the commit reads
    # under its lock is the base (an API caller that plans and commits at once).
    base: Base | None = None

    @property
    def replaces(self) -> bool:
        """An overwrite, upsert or delete: it replaces or rewrites what its base holds, so it
        conflicts with any commit that landed after it read the base (an append rebases)."""
        return self.overwrite or self.change != APPEND

    @property
    def version(self) -> Version:
        return Version.at(self.version_uri)

    @property
    def staging_root(self) -> str:
        """Every attempt of this job stages below here."""
        version = self.version
        return version.storage.join(version.staging_uri, self.job_id)


@dataclass(frozen=True)
class StagedIndex:
    """The new version's own index file, staged: where, its bytes and rows, and the layers it reads through."""

    path: str
    bytes: int
    rows: int
    layers: list[IndexLayer]


@dataclass(frozen=True)
class Snapshot:
    """The version as the commit found it under its lock, and what the new manifest extends."""

    manifest_bytes: bytes | None  # the manifest in place: the journal records its digest as its base
    existing: Manifest | None  # that manifest, parsed; None when there is none or the commit overwrites it
    base: Manifest | None  # what the commit extends: `existing`, or the parent's with every shard a reference
    # The files of the base's index (index_layers.py), own file first, each with the layer entry the
    # new version records if it reads through it rather than folding it (None: `existing`'s own file,
    # always rewritten); empty when the base has no rows.
    base_parts: list[tuple[IndexPart, IndexLayer | None]] = dataclasses.field(default_factory=list)

    @classmethod
    def read(cls, version: Version, request: CommitRequest) -> Snapshot:
        manifest_bytes, _ = version.read_manifest_bytes()
        fault_points.point("commit:manifest-read")
        _check_base(version, request, manifest_bytes)
        existing = None if request.overwrite or manifest_bytes is None else Manifest.from_json(manifest_bytes)
        base, base_parts = _base(version, request, existing)
        return cls(manifest_bytes, existing, base, base_parts)

    @property
    def base_index(self) -> BaseIndex | None:
        """The base's live index rows, read by what a change touches (index_merge.BaseIndex)."""
        if not self.base_parts or self.base is None:
            return None
        return BaseIndex([part for part, _ in self.base_parts], locations(self.base))

    @property
    def base_owner(self) -> str:
        return "version" if self.base is self.existing else "parent version"


def commit_job(request: CommitRequest) -> Manifest | None:
    """Make the tasks' staged shards final, or raise with nothing of them visible; the version's
    manifest after the commit (None: a stream's empty first batch left no manifest)."""
    version = request.version
    journal: Journal | None = None
    try:
        with CommitLock(version, request.job_id, lease_seconds=request.lease_seconds) as lock:
            roll_forward(version, lock)
            version.check_writable()
            snapshot = Snapshot.read(version, request)
            if _nothing_to_commit(version, request, snapshot):
                _remove_staging(request)
                return snapshot.existing
            plan = CommitPlan.make(version, request, snapshot, lock)
            index = plan.merge_index()
            lock.renew()
            planned = plan.journal(index)
            _check_uploads(version, plan.attempts, planned)
            lock.check()
            fault_points.point("commit:planned")
            token = _claim_journal_slot(version, planned)
            journal = planned
            fault_points.point("commit:journal-written")
            _confirm_decided(version, lock, token)
            apply(version, journal, token, lock)
    except BaseException as error:
        landed = journal is not None and isinstance(error, LostCommitLock) and has_landed(version, journal)
        if journal is not None and isinstance(error, LostCommitLock) and not landed:
            _discard_if_stale(version, journal)
        # A decided commit that failed half-way keeps its staged files: the next committer finishes it.
        if not landed and (journal is None or journal_job(version) != request.job_id):
            _remove_staging(request)
        if not landed:
            raise
        log.warning(
            "webdataset: lost the commit lock of %s, but another committer finished job %s", version.uri, request.job_id
        )
    _remove_staging(request)
    manifest = journal.parsed_manifest
    log.info(
        "webdataset: committed %d shards, %d samples, %d bytes to %s",
        len(manifest.shards),
        manifest.samples,
        manifest.bytes,
        version.uri,
    )
    return manifest


def _nothing_to_commit(version: Version, request: CommitRequest, snapshot: Snapshot) -> bool:
    """A stream's batch that is committed already (Spark replays it after a restart), or an empty one."""
    stream = request.stream
    if stream is None:
        return False
    if snapshot.existing is not None and stream.committed_in(snapshot.existing):
        log.warning(
            "webdataset: batch %d of the stream checkpointed at %s is in %s already "
            "(replayed after a restart): its output is dropped",
            stream.batch_id, stream.checkpoint, version.uri,
        )  # fmt: skip
        return True
    return not any(attempt.shards for attempt in request.attempts)  # an empty micro-batch: nothing to name


def _claim_journal_slot(version: Version, journal: Journal) -> object:
    """The decision: the version's one journal slot, create-only. Its token, to remove it by."""
    try:
        version.storage.create_only(version.journal_uri, journal.to_json())
    except PreconditionFailed:
        raise ConcurrentCommit(
            f"{version.uri}: another commit ({journal_job(version)}) decided first; write again"
        ) from None
    _, token = version.storage.read_versioned(version.journal_uri)
    return token


def _confirm_decided(version: Version, lock: CommitLock, token: object) -> None:
    """Still ours after the journal landed: the lock held, and the version not sealed meanwhile."""
    try:
        lock.check()
        version.check_writable()  # a publisher may have sealed it since (its seal, then our journal)
    except BaseException:
        # Decided: the next holder of the lock finishes it, unless the version was sealed
        # meanwhile, where it is a stray that must not stay in a published directory.
        if version.is_sealed():
            version.storage.delete_if(version.journal_uri, token)
        raise


@dataclass(frozen=True)
class CommitPlan:
    """What the commit decided under its lock before it claims the journal slot: the shards' final
    names, a change's plan and its rewritten shards. Its steps read this value; nothing is passed twice."""

    version: Version
    request: CommitRequest
    snapshot: Snapshot
    attempts: list[StagedAttempt]  # in partition order: shard numbers follow it
    names: list[list[str]]  # each attempt's shards' final names
    change: ChangePlan | None
    rewritten: dict[str, ShardEntry]  # a change's rewritten shards, by name

    @classmethod
    def make(cls, version: Version, request: CommitRequest, snapshot: Snapshot, lock: CommitLock) -> CommitPlan:
        attempts = sorted(request.attempts, key=lambda m: m.partition)
        base = snapshot.base
        deleting = request.change == DELETE
        if not deleting and base is not None:
            _check_fields(version, request, base, snapshot.base_owner)
        names = _shard_names(attempts, base)
        change = None
        if request.change != APPEND and base is not None:
            keys, given = unique_keys(task_keys(version, m.index_path) for m in attempts if m.index_path)
            if deleting:
                given = sum(m.deleted_rows for m in attempts)  # a delete's task keeps each key once
            first = _first_free_number(base) + sum(len(shard_names) for shard_names in names)
            change = plan_change(
                request.change, keys, given, base, snapshot.base_index, version, first, request.staging_root
            )
            lock.check()
        rewritten = (
            rewrite_shards(version, change, version.storage.concurrent_requests, lock.renew, _sha256(request, base))
            if change
            else {}
        )
        return cls(version, request, snapshot, attempts, names, change, rewritten)

    @property
    def recorded(self) -> Manifest | None:
        """The manifest whose fields and options the new one keeps: a delete reads keys alone."""
        return self.snapshot.base if self.request.change == DELETE else None

    def shard_entries(self) -> tuple[list[ShardEntry], list[ShardEntry]]:
        """The new manifest's shards: those it keeps of the base (a change's rewrites in place), and those its tasks wrote."""
        base, change = self.snapshot.base, self.change
        kept = list(base.shards) if base else []  # the version's, or the parent's as references
        if change is not None and base is not None:
            kept = change.entries(base, self.rewritten)
        written = [
            ShardEntry.written(shard, name, attempt.keys_ascending)
            for attempt, shard_names in zip(self.attempts, self.names)
            for shard, name in zip(attempt.shards, shard_names)
        ]
        return kept, written

    def _new_keys(self) -> pa.Array | None:
        """The keys the tasks wrote, sorted and once each (None for a delete: its rows are keys to remove)."""
        if self.request.change == DELETE:
            return None
        keys, _ = unique_keys(task_keys(self.version, m.index_path) for m in self.attempts if m.index_path)
        return keys

    def merge_index(self) -> StagedIndex:
        """The next index: the tasks' rows, a change's moved rows and the base's live rows merged to
        prove every key unique (raise DuplicateKey naming both owners); staged in the job's directory
        are the rows the new version stores (its own, and the base layers it folds, see
        index_layers.fold_count); the layers it reads through are recorded, not written."""
        version, request, snapshot, change = self.version, self.request, self.snapshot, self.change
        kept, written_shards = self.shard_entries()
        new_shards = kept + written_shards
        listed = locations(Manifest(new_shards, [], {}))
        own_rows = sum(shard.samples for shard in new_shards if shard.version is None)
        candidates = [layer for _, layer in snapshot.base_parts if layer is not None]
        folded = fold_count(own_rows, candidates)
        layers = candidates[folded:]
        runs: list[Iterator[pa.RecordBatch]] = []
        owners: list[str] = []
        written: set[int] = set()
        new_keys = self._new_keys() if layers else None
        for part, layer in snapshot.base_parts:
            if layer is None or layer not in layers:
                written.add(len(runs))
                runs.append(base_part_rows(part, listed))
            elif new_keys is not None and len(new_keys):
                # a layer kept as it is: its live keys are unique with the base's other live rows (the
                # base's own merge proved it), so only the blocks where the new keys fall are read
                runs.append(layer_rows_near(part, listed, new_keys))
            else:
                continue  # no new key (a delete): nothing to prove against this layer
            what = "own index" if layer is None else f"index layer of version {layer.version}"
            owners.append(f"the {snapshot.base_owner}'s {what} ({len(snapshot.base.shards)} committed shard(s))")  # type: ignore[union-attr]
        moved = change.moved_rows() if change is not None else None
        if moved is not None:
            written.add(len(runs))
            runs.append(iter([moved]))
            owners.append("the samples the change's rewritten shards keep")
        for attempt, shard_names in zip(self.attempts, self.names):
            if attempt.index_path and request.change != DELETE:  # a delete's rows are keys to remove
                written.add(len(runs))
                runs.append(task_index_rows(version, attempt.index_path, shard_names))
                owners.append(f"partition {attempt.partition}")
        existing = snapshot.existing
        serial = sample_index_serial(existing.sample_index) + 1 if existing and existing.sample_index else 0
        staged = version.storage.join(request.staging_root, staged_sample_index_name(serial))
        size, rows = merge_index(version, runs, owners, staged, written)
        return StagedIndex(staged, size, rows, layers)

    def journal(self, index: StagedIndex) -> Journal:
        """The journal of this plan with its sample index staged: every rename and the new manifest."""
        version, request, base, change = self.version, self.request, self.snapshot.base, self.change
        kept, entries = self.shard_entries()
        renames: list[tuple[str, str]] = []
        if change is not None and base is not None:
            renames += [(_relative(version, rewrite.staged), rewrite.name) for rewrite in change.rewrites]
        for attempt, shard_names in zip(self.attempts, self.names):
            for shard, name in zip(attempt.shards, shard_names):
                staged_shard = version.storage.join(attempt.staging, staged_shard_name(shard.sequence))
                renames.append((_relative(version, staged_shard), name))
        staged_index, index_bytes = index.path, index.bytes
        sample_index = sample_index_path(sample_index_serial(staged_index))
        renames.append((_relative(version, staged_index), sample_index))
        previous_run = dict(base.run) if base else {}
        streams = dict(previous_run.get(STREAMS_KEY, {}))
        if request.stream is not None:
            streams[request.stream.checkpoint] = request.stream.batch_id
        recorded = self.recorded
        manifest = Manifest(
            shards=kept + entries,
            fields=recorded.fields if recorded else request.fields,
            options=recorded.options if recorded else request.options,
            sample_index=sample_index,
            sample_index_bytes=index_bytes,
            sample_index_layers=index.layers,
            parent=request.parent if request.parent is not None else (base.parent if base else None),
            run={
                "spark_application_id": request.application_id,
                "job_id": request.job_id,
                "mode": "overwrite" if request.overwrite else "append",
                "commits": int(previous_run.get("commits", 0)) + 1,
                "committed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "oversize_samples": list(previous_run.get("oversize_samples", []))
                + [shard.first_key for attempt in self.attempts for shard in attempt.shards if shard.oversize],
                **({STREAMS_KEY: streams} if streams else {}),
                **_change_record(previous_run, change, entries),
            },
        )
        return Journal.planned(
            request.job_id, request.overwrite, renames, manifest, digest(self.snapshot.manifest_bytes)
        )


def _sha256(request: CommitRequest, base: Manifest | None) -> bool | None:
    """Whether rewritten shards carry sha256: the dataset's checksum setting (a delete's is its base's)."""
    options = base.options if request.change == DELETE and base is not None else request.options
    checksum = options.get("checksum")
    return None if checksum is None else checksum == SHA256


def _discard_if_stale(version: Version, journal: Journal) -> None:
    """A committer frozen between its last lease check and its journal write wrote a journal planned
    against a manifest another commit has replaced since: nobody will ever apply it, so its own job
    removes it (the object it wrote, by token), and a failed job leaves nothing behind."""
    data, token = version.storage.read_versioned(version.journal_uri)
    if data is None or Journal.from_json(data).job_id != journal.job_id:
        return
    current, _ = version.read_manifest_bytes()
    if journal_state(journal, current) is JournalState.STALE:
        version.storage.delete_if(version.journal_uri, token)


def _check_base(version: Version, request: CommitRequest, current: bytes | None) -> None:
    """ConcurrentCommit when an overwrite, upsert or delete was planned against a manifest that is
    no longer the version's: committing it would silently undo the commit that landed meanwhile."""
    if request.base is None or not request.replaces or digest(current) == request.base.digest:
        return
    try:
        by = Manifest.from_json(current).run.get("job_id") if current is not None else None
    except Exception:  # noqa: BLE001 - only for the message; the manifest is checked where it is used
        by = None
    what = "overwrite" if request.overwrite else request.change
    moved = (
        f"job {by} committed to it"
        if by
        else ("its manifest was removed" if current is None else "its manifest changed")
    )
    raise ConcurrentCommit(
        f"{version.uri}: the {what} of job {request.job_id} was planned against "
        f"{'no manifest' if request.base.digest is None else 'manifest sha256 ' + request.base.digest}, "
        f"but {moved} since (manifest sha256 {digest(current)}); an {what} never replaces a commit it did not "
        "see, so nothing of it was committed: write again (to add onto a version, use mode('append'))"
    )


def _check_fields(version: Version, request: CommitRequest, base: Manifest, whose: str) -> None:
    """The job's fields must be the base's, names and Spark types in order: types are part of a
    version's (and a chain's) schema, and readers take them from the manifest."""
    names = [f["name"] for f in request.fields]
    if names != [f["name"] for f in base.fields]:
        raise FieldMismatch(
            f"{request.change} to {version.uri}: the DataFrame's fields {names} differ "
            f"from the {whose}'s {[f['name'] for f in base.fields]}"
        )
    for new, old in zip(request.fields, base.fields):
        if new.get("type") is not None and old.get("type") is not None and new["type"] != old["type"]:
            raise FieldMismatch(
                f"{request.change} to {version.uri}: field {new['name']!r} has type {new['type']} in the DataFrame "
                f"but {old['type']} in the {whose}; a version's fields keep their types (cast the column)"
            )


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


def _base(
    version: Version, request: CommitRequest, existing: Manifest | None
) -> tuple[Manifest | None, list[tuple[IndexPart, IndexLayer | None]]]:
    """What the commit builds on: the version's manifest (an append), or its parent's with every
    shard a reference (a new version with a parent); and the files of that manifest's index, each
    with the layer entry the new version records if it does not fold it (index_layers.py)."""
    if request.parent is None or (existing is not None and existing.parent == request.parent):
        if existing is None or not existing.shards:
            return existing, []
        if not existing.sample_index:
            raise NoSampleIndex(
                f"{version.uri} was written before spark-webdataset kept a sample index: appending to it "
                "cannot prove the new keys unique; write it again (mode overwrite) or into a new version"
            )
        own, *layers = index_parts(version, existing)
        return existing, [(own, None), *zip(layers, existing.sample_index_layers)]
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
        parent,
        shards=[shard.referenced_from(request.parent) for shard in parent.shards],
        run={},
        sample_index_layers=[],
    )
    if not parent.shards:
        return referenced, []
    own, *layers = index_parts(parent_version, parent, stored_in=request.parent)
    assert parent.sample_index is not None and parent.sample_index_bytes is not None
    own_layer = IndexLayer(request.parent, parent.sample_index, parent.sample_index_bytes, file_rows(own))
    return referenced, [(own, own_layer), *zip(layers, parent.sample_index_layers)]


def _change_record(
    previous_run: dict[str, Any], change: ChangePlan | None, entries: list[ShardEntry]
) -> dict[str, Any]:
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
    if not roots and any(final != journal.parsed_manifest.sample_index for _, final in journal.renames):
        roots = [version.storage.join(version.staging_uri, journal.job_id)]  # only rewrites were staged
    stored: dict[str, str | None] = {}
    for root in roots:
        below = storage.crc32c_below(root)
        if below is None:
            return  # local files: the server keeps no checksum, and reading them again is validation's job
        stored.update({f"{root.rstrip('/')}/{relative}": crc for relative, crc in below.items()})
    written = {shard.name: shard.crc32c for shard in journal.parsed_manifest.shards}
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
