"""Publish a validated version: write its shard index, make it visible, move LATEST forward.

A version is visible if and only if its publish record exists. Publish
first seals the version directory (under the commit lock, so no commit is
half-way), then creates the record create-only: of two racing publishers
exactly one wins, and a lost response is settled by reading the record
back. LATEST moves by compare-and-swap to the published version with the
greatest (logical date, version id): a backfill never moves it back.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from .. import fault_points
from ..errors import NotCommitted, PreconditionFailed, PublishRefused
from ..format.manifest import Manifest, ShardEntry
from .layout import Dataset, Version
from .lock import DEFAULT_LEASE_SECONDS, DEFAULT_WAIT_SECONDS, CommitLock
from .ordering import iso_utc, parse_logical_date, record_order, timestamp_in_id
from .paths import check_dataset_root
from .staging import clean_dead_staging
from .tree import MANIFEST_NAME

RECORD_KIND = "spark-webdataset-published-v1"


@dataclass(frozen=True)
class PublishResult:
    version: str
    uri: str
    samples: int
    shards: int
    bytes: int
    index_uri: str
    already_published: bool
    latest: str | None
    logical_date: str | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _index_entry(shard: ShardEntry, checked: dict | None) -> dict:
    # a referenced shard by its URL relative to this index: ../<version>/shard-000003.tar
    entry = {"url": shard.location, "nsamples": shard.samples, "filesize": shard.bytes}
    # The writer records crc32c; sha256 comes from validation, which hashed every byte
    # (or from a manifest written with checksum=sha256, which validation checked it against).
    for what in ("crc32c", "sha256"):
        value = getattr(shard, what) or (checked or {}).get(what)
        if value:
            entry[what] = value
    entry["first_key"] = shard.first_key
    entry["last_key"] = shard.last_key
    return entry


def shard_index(manifest: Manifest, source: str, validated: Iterable[dict] = ()) -> bytes:
    """A wids shard index (urls relative to it) with our extras; same manifest and report, same bytes.

    `validated` is the validation report's per-shard list (name, crc32c, sha256, ...).
    """
    checked = {shard["name"]: shard for shard in validated}  # by location (validation names referenced shards so)
    document = {
        "__kind__": "wids-shard-index-v1",
        "wids_version": 1,
        "name": source,
        "shardlist": [_index_entry(shard, checked.get(shard.location)) for shard in manifest.shards],
        "samples": manifest.samples,
        "fields": manifest.fields,
        "source": {"manifest": MANIFEST_NAME, "spark_application_id": manifest.run.get("spark_application_id")},
    }
    return (json.dumps(document, indent=1, ensure_ascii=False) + "\n").encode()


def publish(
    root: str,
    version: str,
    logical_date: str | datetime.datetime | None = None,
    allow_empty: bool = False,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    lock_wait_seconds: float = DEFAULT_WAIT_SECONDS,
) -> PublishResult:
    """Seal, index and publish `ROOT/versions/VERSION`; a no-op if published with this manifest.
    ConcurrentCommit (exit 3) when a commit holds the version's lock longer than `lock_wait_seconds`."""
    check_dataset_root(root)  # never a root inside another dataset or a version: NestedDatasetRoot
    dataset = Dataset(root)
    target = dataset.version(version)  # refuses ids outside the rule
    storage = dataset.storage
    existing = dataset.read_record(version)
    if existing is not None:
        return _republish(dataset, target, existing, target.manifest_digest())
    _check_exists(dataset, target)  # before the lock: its object would create the version's directory
    owner = f"publish-{uuid.uuid4().hex}"
    with CommitLock(target, owner, lease_seconds=lease_seconds, wait_seconds=lock_wait_seconds) as lock:
        manifest_bytes, token = target.read_manifest_bytes()
        if manifest_bytes is None:
            raise PublishRefused(f"{target.uri}: no {MANIFEST_NAME}; write the version first")
        digest = hashlib.sha256(manifest_bytes).hexdigest()
        _check_not_retired(target)
        validation = _check_validation(target, digest)
        if not allow_empty and Manifest.from_json(manifest_bytes).samples == 0:
            raise PublishRefused(
                f"{target.uri}: the version holds no samples; refusing to publish it (an empty source or "
                "filter?); pass --allow-empty to publish an empty version on purpose"
            )
        # A sealed directory holds exactly the version: a dead job's staging goes first (a live
        # job's stays; its commit will find the seal and refuse).
        clean_dead_staging(target, own_job_id="")
        lock.check()
        fault_points.point("publish:sealing")
        _seal(target, lock, manifest_bytes, token)
    # Sealed: nothing can change the version now. The index has the same bytes whoever writes it,
    # and the record is create-only: a publisher frozen from here on can only lose the race.
    manifest = Manifest.from_json(manifest_bytes)
    storage.write_atomic(
        target.index_uri, shard_index(manifest, f"{dataset.root}@{version}", validation.get("shards", ()))
    )
    moment = _logical_date(version, logical_date)
    record = {
        "__kind__": RECORD_KIND,
        "version": version,
        "uri": target.uri,
        "manifest_sha256": digest,
        "index": target.index_uri.rsplit("/", 1)[-1],
        "samples": manifest.samples,
        "shards": len(manifest.shards),
        "bytes": manifest.bytes,
        # what its directory stores, and what it references in its parent's chain (no copy)
        "parent": manifest.parent,
        "bytes_stored": sum(shard.bytes for shard in manifest.own_shards),
        # its sample index: the file it stores, and its ancestors' files it reads through (layers)
        "index_bytes_stored": manifest.sample_index_bytes,
        "index_layers": len(manifest.sample_index_layers),
        "index_layer_bytes": sum(layer.bytes for layer in manifest.sample_index_layers),
        "logical_date": moment,
        "published_at": _now(),
        # unique per attempt: a 412 whose read-back shows our own record is a
        # retry that landed; someone else's record means we lost the race
        "publish_id": uuid.uuid4().hex,
    }
    fault_points.point("publish:recording")
    try:
        storage.create_only(dataset.record_uri(version), (json.dumps(record, indent=1) + "\n").encode())
    except PreconditionFailed:
        # Another publisher won the race, or our own retried write landed:
        # the record itself says which.
        return _republish(dataset, target, dataset.read_record(version), digest)
    if storage.exists(target.retired_uri):
        # gc marks a version retired, then looks for a record; we create the record, then look for the
        # mark: one of the two sees the other, so gc never deletes the files of a version left published.
        storage.delete(dataset.record_uri(version))
        _check_not_retired(target)
    latest = advance_latest(root, version)
    return PublishResult(
        version,
        target.uri,
        manifest.samples,
        len(manifest.shards),
        manifest.bytes,
        target.index_uri,
        False,
        latest,
        moment,
    )


SEAL = json.dumps({"__kind__": "spark-webdataset-seal-v1"}).encode()  # same bytes every time


def _seal(target: Version, lock: CommitLock, manifest_bytes: bytes, token: object) -> None:
    """Seal the version, then make sure no commit slipped in. A committer checks for the seal after
    it claims the journal slot, and we check the slot after sealing: one of the two sees the other.
    Then a compare-and-swap of the manifest onto itself: a committer that planned against it
    and lost its lock can no longer replace it. Refused: the seal goes again."""
    storage = target.storage
    sealed_here = not storage.exists(target.seal_uri)
    if sealed_here:
        storage.write_atomic(target.seal_uri, SEAL)
    try:
        if storage.exists(target.journal_uri):
            raise NotCommitted(f"{target.uri}: a commit is unfinished; write the version again before publishing")
        lock.check()
        if not storage.replace_if(target.manifest_uri, manifest_bytes, token):
            raise PublishRefused(f"{target.uri}: the manifest changed while publishing; validate again")
    except BaseException:
        if sealed_here:
            storage.delete(target.seal_uri)
        raise


def _now() -> str:
    return iso_utc(datetime.datetime.now(datetime.timezone.utc))


def _logical_date(version: str, given: str | datetime.datetime | None) -> str:
    if isinstance(given, datetime.datetime):
        return iso_utc(given)
    if given:
        return iso_utc(parse_logical_date(given))
    return iso_utc(timestamp_in_id(version) or datetime.datetime.now(datetime.timezone.utc))


def _check_exists(dataset: Dataset, target: Version) -> None:
    """PublishRefused, creating nothing, for a version that was never committed (no manifest)."""
    storage = target.storage
    if storage.exists(target.manifest_uri):
        return
    if not storage.list_sizes(target.uri) and not storage.list_dirs(target.uri):
        versions = ", ".join(dataset.version_ids()) or "none"
        raise PublishRefused(
            f"{dataset.root}: no version {target.name!r} to publish ({target.uri} does not exist; versions: {versions}); "
            "write it first"
        )
    raise PublishRefused(f"{target.uri}: no {MANIFEST_NAME}; write the version first")


def _check_not_retired(target: Version) -> None:
    """gc retired the version (its files are going or gone): it may never become visible again."""
    if target.storage.exists(target.retired_uri):
        raise PublishRefused(
            f"{target.uri}: gc retired this version (it holds {target.retired_uri.rsplit('/', 1)[-1]}); "
            "its shards are removed or going; write a new version instead"
        )


def _check_validation(target: Version, digest: str) -> dict:
    """The version's passing validation report for this manifest, or PublishRefused."""
    validation = target.read_validation()
    if validation is None:
        raise PublishRefused(f"{target.uri}: not validated; run `spark-webdataset validate {target.uri}` first")
    if not validation.get("ok"):
        raise PublishRefused(
            f"{target.uri}: validation failed with {validation.get('error_count')} error(s); refusing to publish"
        )
    if validation.get("manifest_sha256") != digest:
        raise PublishRefused(f"{target.uri}: the validation report is for another manifest; validate again")
    return validation


def _republish(dataset: Dataset, target: Version, record: dict | None, digest: str | None) -> PublishResult:
    if record is None or record.get("manifest_sha256") != digest:
        raise PublishRefused(
            f"version {target.name!r} of {dataset.root} is published already with another manifest; "
            "published versions are immutable"
        )
    latest = advance_latest(dataset.root, target.name)
    return PublishResult(
        target.name,
        record["uri"],
        record["samples"],
        record["shards"],
        record["bytes"],
        dataset.storage.join(record["uri"], record["index"]),
        True,
        latest,
        record.get("logical_date"),
    )


def advance_latest(root: str, version: str) -> str:
    """Set LATEST to `version` unless it names one with a greater (logical date, id); return LATEST."""
    dataset = Dataset(root)
    storage = dataset.storage
    candidate = record_order(version, dataset.read_record(version))
    while True:
        current, token = storage.read_versioned(dataset.latest_uri)
        current_version = current.decode().strip() if current else None
        if current_version is not None and current_version != version:
            if record_order(current_version, dataset.read_record(current_version)) >= candidate:
                return current_version
        elif current_version == version:
            return version
        fault_points.point("latest:deciding")  # a test runs another publisher here: the swap below must lose
        if storage.replace_if(dataset.latest_uri, (version + "\n").encode(), token):
            return version


def set_latest(root: str, version: str, by: str) -> str | None:
    """Point LATEST at a published `version`, backwards too (undo a mistaken publish, e.g. a
    logical date far in the future); every change is recorded in the root with who and when.
    Returns what LATEST named before."""
    dataset = Dataset(root)
    storage = dataset.storage
    if dataset.read_record(version) is None:
        raise PublishRefused(
            f"{dataset.root}: version {version!r} is not published (published: {', '.join(dataset.published_ids()) or 'none'}); "
            "LATEST may only name a published version"
        )
    while True:
        current, token = storage.read_versioned(dataset.latest_uri)
        previous = current.decode().strip() if current else None
        if storage.replace_if(dataset.latest_uri, (version + "\n").encode(), token):
            break
    change = {"latest": version, "previous": previous, "by": by, "at": _now()}
    while True:
        data, token = storage.read_versioned(dataset.latest_changes_uri)
        changes = json.loads(data) if data else []
        if storage.replace_if(
            dataset.latest_changes_uri, (json.dumps(changes + [change], indent=1) + "\n").encode(), token
        ):
            return previous


def read_latest(root: str) -> str | None:
    return Dataset(root).read_latest()
