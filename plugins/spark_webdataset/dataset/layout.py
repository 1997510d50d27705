"""A dataset on storage: `Dataset` (a root: its versions, publish records, LATEST, pins) and
`Version` (one version directory), the objects every other module asks for paths. The names
they join are dataset/tree.py's, the rules a place must keep dataset/paths.py's.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass

from ..errors import InvalidVersionId, ManifestChanged, NotCommitted, VersionSealed
from ..format.manifest import Manifest, ShardEntry
from ..storage import Storage, storage_for
from .paths import (
    check_shard_location,
    check_version_id,
    check_write_target,
    is_version_id,
    normalize_place,
    version_place,
)
from .tree import (
    COMMIT_JOURNAL_NAME,
    COMMIT_LOCK_NAME,
    LATEST_CHANGES_NAME,
    LATEST_NAME,
    MANIFEST_NAME,
    PINS_DIR,
    PUBLISHED_DIR,
    RETIRED_NAME,
    SAMPLE_INDEX_DIR,
    SEAL_NAME,
    SHARD_INDEX_NAME,
    STAGING_DIR,
    VALIDATION_NAME,
    VERSIONS_DIR,
    WRITER_MARK_NAME,
    shard_name,
)


def _read_json(storage: Storage, path: str) -> dict | None:
    """A small JSON document of ours (a publish record, a report); None if absent, ManifestChanged
    naming it if it is not a JSON object (someone wrote over it)."""
    data, _ = storage.read_versioned(path)  # absent is None: no separate exists() call
    if data is None:
        return None
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError
        raise ManifestChanged(f"{path}: not a JSON document ({error}); it was changed by hand") from None
    if not isinstance(document, dict):
        raise ManifestChanged(f"{path}: a {type(document).__name__}, not a JSON object; it was changed by hand")
    return document


@dataclass(frozen=True)
class Dataset:
    """A dataset root: its versions, publish records and LATEST."""

    root: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", normalize_place(self.root, "dataset root"))

    @functools.cached_property
    def storage(self) -> Storage:
        return storage_for(self.root)

    def version(self, version: str) -> Version:
        check_version_id(version)
        return Version(self.storage.join(self.root, VERSIONS_DIR, version), version, self)

    @property
    def latest_uri(self) -> str:
        return self.storage.join(self.root, LATEST_NAME)

    @property
    def latest_changes_uri(self) -> str:
        return self.storage.join(self.root, LATEST_CHANGES_NAME)

    def record_uri(self, version: str) -> str:
        return self.storage.join(self.root, PUBLISHED_DIR, f"{check_version_id(version)}.json")

    def pin_uri(self, version: str) -> str:
        return self.storage.join(self.root, PINS_DIR, check_version_id(version))

    def pinned_ids(self) -> list[str]:
        """Pinned versions (valid ids only)."""
        names = self.storage.list_sizes(self.storage.join(self.root, PINS_DIR))
        return sorted(name for name in names if is_version_id(name))

    def version_ids(self) -> list[str]:
        """Directories under versions/ (valid ids only)."""
        return [
            name for name in self.storage.list_dirs(self.storage.join(self.root, VERSIONS_DIR)) if is_version_id(name)
        ]

    def published_ids(self) -> list[str]:
        names = self.storage.list_sizes(self.storage.join(self.root, PUBLISHED_DIR))
        return sorted(name[: -len(".json")] for name in names if name.endswith(".json"))

    def read_record(self, version: str) -> dict | None:
        return _read_json(self.storage, self.record_uri(version))

    def read_latest(self) -> str | None:
        data, _ = self.storage.read_versioned(self.latest_uri)
        if not data:
            return None
        try:
            return check_version_id(data.decode("ascii").strip())
        except (UnicodeDecodeError, InvalidVersionId):
            raise ManifestChanged(
                f"{self.latest_uri}: holds {data[:80]!r}, not a version id; it was changed by hand "
                "(`spark-webdataset latest ROOT --set ID` points it at a published version)"
            ) from None

    def latest(self) -> tuple[Version, Manifest]:
        """The LATEST published version and its manifest (read once), checked against its publish record."""
        latest = self.read_latest()
        if latest is None:
            raise NotCommitted(f"{self.root}: no {LATEST_NAME}; publish a version first")
        return self.published(latest)

    def published(self, version_id: str) -> tuple[Version, Manifest]:
        """A published version and its manifest (read once), checked against its publish record.
        ManifestChanged says which check failed: no record (retired by gc or never published), no
        manifest, or a manifest whose digest is not the one the record holds."""
        version = self.version(version_id)
        record = self.read_record(version_id)
        if record is None:
            raise ManifestChanged(
                f"version {version_id!r} of {self.root} has no publish record ({PUBLISHED_DIR}/{version_id}.json): "
                "it was retired by gc, or never published; build on a published version "
                f"(published: {', '.join(self.published_ids()) or 'none'})"
            )
        data, _ = version.read_manifest_bytes()
        if data is None:
            raise ManifestChanged(
                f"{version.uri}: published, but it holds no {MANIFEST_NAME} (removed after publishing, or gc is "
                "retiring it); the published version was changed"
            )
        digest = hashlib.sha256(data).hexdigest()
        if record.get("manifest_sha256") != digest:
            raise ManifestChanged(
                f"{version.uri}: its manifest (sha256 {digest}) is not the one published "
                f"(sha256 {record.get('manifest_sha256')}); the published version was changed"
            )
        return version, Manifest.from_json(data)

    def is_dataset_root(self) -> bool:
        return self.storage.exists(self.latest_uri) or bool(
            self.storage.list_sizes(self.storage.join(self.root, PUBLISHED_DIR))
        )


@dataclass(frozen=True)
class Version:
    """One version directory; `dataset` and `id` are known when it sits at ROOT/versions/ID."""

    uri: str
    id: str | None = None
    dataset: Dataset | None = None

    @classmethod
    def at(cls, uri: str) -> Version:
        """The version at a directory URI, normalised (`normalize_uri`); recognises ROOT/versions/ID.
        A directory right under a `versions/` is a version: its name must be an id by the rule
        (InvalidVersionId), never a plain directory named `.hidden`, `２０２６` or `..`."""
        uri = normalize_place(uri)
        place = version_place(uri)
        return Dataset(place[0]).version(place[1]) if place is not None else cls(uri)

    @functools.cached_property
    def storage(self) -> Storage:
        return storage_for(self.uri)

    def path(self, *parts: str) -> str:
        return self.storage.join(self.uri, *parts)

    @property
    def manifest_uri(self) -> str:
        return self.path(MANIFEST_NAME)

    @property
    def validation_uri(self) -> str:
        return self.path(VALIDATION_NAME)

    @property
    def index_uri(self) -> str:
        return self.path(SHARD_INDEX_NAME)

    @property
    def seal_uri(self) -> str:
        return self.path(SEAL_NAME)

    @property
    def mark_uri(self) -> str:
        return self.path(WRITER_MARK_NAME)

    @property
    def retired_uri(self) -> str:
        return self.path(RETIRED_NAME)

    @property
    def staging_uri(self) -> str:
        return self.path(STAGING_DIR)

    @property
    def sample_index_dir_uri(self) -> str:
        return self.path(SAMPLE_INDEX_DIR)

    @property
    def lock_uri(self) -> str:
        return self.path(COMMIT_LOCK_NAME)

    @property
    def journal_uri(self) -> str:
        return self.path(COMMIT_JOURNAL_NAME)

    def shard_uri(self, index_or_name: int | str) -> str:
        name = shard_name(index_or_name) if isinstance(index_or_name, int) else index_or_name
        return self.path(name)

    def entry_uri(self, entry: ShardEntry) -> str:
        """Where a manifest entry's bytes are: here, or in the version a reference names (resolved
        through the dataset, never by joining `..`, which object stores do not resolve)."""
        if entry.version is None:
            return self.path(entry.name)
        if self.dataset is None:
            raise NotCommitted(
                f"{self.uri}: references shards of version {entry.version!r}, but is not inside a dataset root"
            )
        return self.dataset.version(entry.version).shard_uri(entry.name)

    def location_uri(self, location: str) -> str:
        """Where a shard location (`name` or `../<version>/<name>`, as the index and shardindex.json
        give it) is, checked by the location rule."""
        check_shard_location(location)
        if not location.startswith("../"):
            return self.path(location)
        _, stored_in, name = location.split("/")
        return self.entry_uri(ShardEntry(name, 0, 0, "", "", version=stored_in))

    def location_uris(self, manifest: Manifest) -> dict[str, str]:
        """Each shard's location (as the sample index names it) and where its bytes are."""
        return {entry.location: self.entry_uri(entry) for entry in manifest.shards}

    @property
    def name(self) -> str:
        return self.id or self.uri.rsplit("/", 1)[-1]

    # -- reads ---------------------------------------------------------------

    def read_manifest_bytes(self) -> tuple[bytes | None, object]:
        return self.storage.read_versioned(self.manifest_uri)

    def read_manifest(self) -> Manifest | None:
        data, _ = self.read_manifest_bytes()
        return None if data is None else Manifest.from_json(data)

    def manifest_digest(self) -> str | None:
        data, _ = self.read_manifest_bytes()
        return None if data is None else hashlib.sha256(data).hexdigest()

    def read_validation(self) -> dict | None:
        return _read_json(self.storage, self.validation_uri)

    def is_published(self) -> bool:
        return (
            self.dataset is not None and self.id is not None and self.storage.exists(self.dataset.record_uri(self.id))
        )

    def is_sealed(self) -> bool:
        return self.storage.exists(self.seal_uri)

    def written_by_us(self) -> bool:
        """Our writer staged into this directory at some point (its mark or staging is there)."""
        return self.storage.exists(self.mark_uri) or bool(self.storage.list_dirs(self.staging_uri))

    def committed_manifest(self) -> Manifest | None:
        """The manifest; None for a directory no writer of ours touched; NotCommitted for one mid-commit."""
        manifest = self.read_manifest()
        if manifest is None and self.written_by_us():
            raise NotCommitted(
                f"{self.uri}: not committed (our writer staged here but there is no {MANIFEST_NAME}: a write "
                "is running or died inside its commit; the next write to it repairs it)"
            )
        return manifest

    def check_writable(self) -> None:
        """Refuse any write into a sealed or published version (published versions are immutable), and
        any write below another dataset's root or a version directory (`check_dataset_root`)."""
        check_write_target(self.uri, self.dataset.root if self.dataset is not None else None)
        published = self.is_published()
        if published or self.is_sealed():
            state = "published" if published else "sealed for publishing"
            raise VersionSealed(
                f"version {self.name!r} at {self.uri} is {state}: published versions are immutable; "
                "write a new version instead"
            )
