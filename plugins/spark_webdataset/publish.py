"""Publish a validated version: write its shard index, make it visible, move LATEST forward.

A version is visible if and only if `_published/<version>.json` exists. It
is created create-only, so of two racing publishers exactly one wins, and
a lost response can be settled by reading the record back. LATEST moves
by compare-and-swap and only forward: a backfill never moves it back.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import uuid
from dataclasses import dataclass

from .format.manifest import MANIFEST_NAME, Manifest
from .storage import storage_for
from .storage.base import PreconditionFailed
from .validate import read_validation

SHARD_INDEX_NAME = "shardindex.json"
PUBLISHED_DIR = "_published"
LATEST_NAME = "LATEST"
RECORD_KIND = "spark-webdataset-published-v1"


class PublishError(RuntimeError):
    """Publishing was refused; the message says why."""


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

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def version_order(version: str) -> tuple:
    """Natural order: digits compare as numbers, so v10 follows v9 and dates sort by time."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.findall(r"\d+|\D+", version))


def shard_index(manifest: Manifest, source: str) -> bytes:
    """A wids shard index (urls relative to it) with our extras; same manifest, same bytes."""
    document = {
        "__kind__": "wids-shard-index-v1",
        "wids_version": 1,
        "name": source,
        "shardlist": [
            {
                "url": shard.name,
                "nsamples": shard.samples,
                "filesize": shard.bytes,
                "sha256": shard.sha256,
                "first_key": shard.first_key,
                "last_key": shard.last_key,
            }
            for shard in manifest.shards
        ],
        "samples": manifest.samples,
        "fields": manifest.fields,
        "source": {"manifest": MANIFEST_NAME, "spark_application_id": manifest.run.get("spark_application_id")},
    }
    return (json.dumps(document, indent=1, ensure_ascii=False) + "\n").encode()


def publish(root: str, version: str) -> PublishResult:
    storage = storage_for(root)
    directory = storage.join(root, "versions", version)
    manifest_path = storage.join(directory, MANIFEST_NAME)
    if not storage.exists(manifest_path):
        raise PublishError(f"{directory}: no {MANIFEST_NAME}; write the version first")
    manifest_bytes = storage.read_bytes(manifest_path)
    digest = hashlib.sha256(manifest_bytes).hexdigest()
    record_path = storage.join(root, PUBLISHED_DIR, f"{version}.json")
    existing = _read_record(storage, record_path)
    if existing is not None:
        return _republish(root, version, existing, digest)
    validation = read_validation(directory)
    if validation is None:
        raise PublishError(f"{directory}: not validated; run `spark-webdataset validate {directory}` first")
    if not validation.get("ok"):
        raise PublishError(
            f"{directory}: validation failed with {validation.get('error_count')} error(s); refusing to publish"
        )
    if validation.get("manifest_sha256") != digest:
        raise PublishError(f"{directory}: the validation report is for another manifest; validate again")
    manifest = Manifest.from_json(manifest_bytes)
    index_path = storage.join(directory, SHARD_INDEX_NAME)
    storage.write_atomic(index_path, shard_index(manifest, f"{root}@{version}"))
    record = {
        "__kind__": RECORD_KIND,
        "version": version,
        "uri": directory,
        "manifest_sha256": digest,
        "index": SHARD_INDEX_NAME,
        "samples": manifest.samples,
        "shards": len(manifest.shards),
        "bytes": manifest.bytes,
        "published_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        # unique per attempt: a 412 whose read-back shows our own record is a
        # retry that landed; someone else's record means we lost the race
        "publish_id": uuid.uuid4().hex,
    }
    try:
        storage.create_only(record_path, (json.dumps(record, indent=1) + "\n").encode())
    except PreconditionFailed:
        # Another publisher won the race, or our own retried write landed:
        # the record itself says which.
        return _republish(root, version, _read_record(storage, record_path), digest)
    latest = advance_latest(root, version)
    return PublishResult(
        version, directory, manifest.samples, len(manifest.shards), manifest.bytes, index_path, False, latest
    )


def _read_record(storage, path: str) -> dict | None:
    return json.loads(storage.read_bytes(path)) if storage.exists(path) else None


def _republish(root: str, version: str, record: dict | None, digest: str) -> PublishResult:
    if record is None or record.get("manifest_sha256") != digest:
        raise PublishError(
            f"version {version!r} of {root} is published already with another manifest; "
            "published versions are immutable"
        )
    storage = storage_for(root)
    latest = advance_latest(root, version)
    return PublishResult(
        version,
        record["uri"],
        record["samples"],
        record["shards"],
        record["bytes"],
        storage.join(record["uri"], record["index"]),
        True,
        latest,
    )


def advance_latest(root: str, version: str) -> str:
    """Set LATEST to `version` unless it already names a greater one; return LATEST."""
    storage = storage_for(root)
    path = storage.join(root, LATEST_NAME)
    while True:
        current, token = storage.read_versioned(path)
        current_version = current.decode().strip() if current else None
        if current_version is not None and version_order(current_version) >= version_order(version):
            return current_version
        if storage.replace_if(path, (version + "\n").encode(), token):
            return version


def read_latest(root: str) -> str | None:
    storage = storage_for(root)
    path = storage.join(root, LATEST_NAME)
    return storage.read_bytes(path).decode().strip() if storage.exists(path) else None


def is_published(root: str, version: str) -> bool:
    storage = storage_for(root)
    return storage.exists(storage.join(root, PUBLISHED_DIR, f"{version}.json"))
