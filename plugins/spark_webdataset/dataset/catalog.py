"""What a dataset root holds: one description of a root and its versions, for every reader of it.

`spark-webdataset inspect` (its text and `--json`) and the Airflow view both describe versions with
this module and its one vocabulary of states (`VersionState`). A version is in exactly one state,
the first that holds:

    latest         published, and LATEST names it
    published      a publish record exists (the commit point of publishing)
    retired        gc retired it (`_RETIRED`, no publish record): what is left is shards that kept
                   versions reference and their proof, or a removal an interrupted gc's rerun finishes
    sealed         sealed for publishing, no publish record (a publish running, or one that died)
    valid          committed; its validation passed for this very manifest
    invalid        committed; its validation failed
    committed      committed; not validated (or validated for another manifest: validate again)
    not committed  our writer staged here and there is no manifest (a write running, or one that
                   died before or inside its commit; the next write repairs it)
    foreign        no manifest, nothing of our writer, but tars (read as a plain directory of tars)
    empty          no manifest, nothing of our writer, no tars

Storage reads, few and bounded: two listings and LATEST for the root, each publish record (the order
needs their logical dates); then per version described: a published version its validation report
(its counts are in its record), an unpublished one its manifest, its report, and whether it is sealed
and whether a commit journal is pending; only a version without a manifest costs more (what our
writer left, or its tars). On gs:// the versions are described concurrently.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import InputError
from ..format.manifest import Manifest
from .layout import Dataset, Version
from .ordering import iso_utc, record_order, timestamp_in_id, version_sort_key

if TYPE_CHECKING:
    from .retention import RetentionPolicy


class VersionState(str, enum.Enum):
    """The one vocabulary of a version's state (its value is the word shown, in JSON too)."""

    LATEST = "latest"
    PUBLISHED = "published"
    RETIRED = "retired"
    SEALED = "sealed"
    VALID = "valid"
    INVALID = "invalid"
    COMMITTED = "committed"
    NOT_COMMITTED = "not committed"
    FOREIGN = "foreign"
    EMPTY = "empty"

    def __str__(self) -> str:
        return self.value

    @property
    def committed(self) -> bool:
        """A committed set of shards is there (a manifest)."""
        return self not in (VersionState.RETIRED, VersionState.NOT_COMMITTED, VersionState.FOREIGN, VersionState.EMPTY)


# The view's row for a version it could not read (inspect fails instead); not a state of a version.
UNREADABLE = "error"


@dataclass(frozen=True)
class ValidationSummary:
    ok: bool
    checked_at: str | None
    error_count: int
    current: bool  # the report is for the version's manifest (publish accepts only such a report)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class VersionDescription:
    version: str
    uri: str
    state: VersionState
    latest: bool  # LATEST names it
    published: bool
    sealed: bool
    commit_pending: bool  # a commit journal waits (a commit running, or one that died; the next write settles it)
    samples: int | None
    shards: int | None
    bytes: int | None
    logical_date: str | None  # its publish record's; unpublished: the timestamp its id spells, if any
    published_at: str | None
    validation: ValidationSummary | None
    parent: str | None = None  # the published version it was built on (its shards referenced)
    bytes_stored: int | None = None  # what its own directory holds; the rest of `bytes` is referenced
    # what was read to describe it, for a caller that shows more (the view's version page); not described
    manifest: Manifest | None = field(default=None, repr=False, compare=False)
    report: dict | None = field(default=None, repr=False, compare=False)
    record: dict | None = field(default=None, repr=False, compare=False)
    # its sample index: ancestors' files it reads through (index_layers.py), their bytes (None: not recorded)
    index_layers: int | None = None
    index_layer_bytes: int | None = None

    @property
    def committed(self) -> bool:
        return self.state.committed

    @property
    def validated(self) -> bool | None:
        return None if self.validation is None else self.validation.ok

    def as_dict(self) -> dict:
        """The JSON form (`inspect --json`, the view's API)."""
        validation = self.validation
        return {
            "version": self.version,
            "uri": self.uri,
            "state": self.state.value,
            "latest": self.latest,
            "published": self.published,
            "sealed": self.sealed,
            "committed": self.committed,
            "commit_pending": self.commit_pending,
            "samples": self.samples,
            "shards": self.shards,
            "bytes": self.bytes,
            "logical_date": self.logical_date,
            "published_at": self.published_at,
            "validated": self.validated,
            "validated_at": None if validation is None else validation.checked_at,
            "validation_errors": None if validation is None else validation.error_count,
            "validation_current": None if validation is None else validation.current,
            "parent": self.parent,
            "bytes_stored": self.bytes_stored,
            "bytes_referenced": None
            if self.bytes is None or self.bytes_stored is None
            else self.bytes - self.bytes_stored,
            "index_layers": self.index_layers,
            "index_layer_bytes": self.index_layer_bytes,
        }


@dataclass(frozen=True)
class RootListing:
    """What a root's listings say (cheap: no version directory is read): its versions in the one
    order (oldest first), their publish records and LATEST."""

    dataset: Dataset
    latest: str | None
    records: dict[str, dict]  # published version -> its publish record
    ids: list[str]

    @classmethod
    def read(cls, dataset: Dataset) -> RootListing:
        published = dataset.published_ids()
        records = {v: r for v in published if (r := dataset.read_record(v)) is not None}
        latest = dataset.read_latest()
        ids = sorted(dataset.version_ids(), key=lambda v: version_sort_key(v, records.get(v)))
        return cls(dataset, latest, records, ids)

    def describe(self, ids: Iterable[str] | None = None) -> list[VersionDescription]:
        """The versions `ids` (default: all, oldest first), described; on gs:// concurrently."""
        chosen = list(self.ids if ids is None else ids)
        threads = min(len(chosen), 8, self.dataset.storage.concurrent_requests)
        if threads <= 1:
            return [self.describe_version(v) for v in chosen]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="catalog") as pool:
            return list(pool.map(self.describe_version, chosen))

    def describe_version(self, version_id: str, read_manifest: bool = False) -> VersionDescription:
        """One version (`read_manifest`: read a published version's manifest too, for its shards)."""
        return describe_version(
            self.dataset.version(version_id), self.records.get(version_id), self.latest, read_manifest
        )


@dataclass(frozen=True)
class RootDescription:
    root: str
    latest: str | None
    versions: list[VersionDescription]  # oldest first
    gc: dict | None = None  # what a gc with the asked policy would retire, remove and free (`gc_would_free`)
    pinned: list[str] = field(default_factory=list)  # versions gc never retires (`spark-webdataset pin`)

    def as_dict(self) -> dict:
        described = {
            "root": self.root,
            "latest": self.latest,
            "pinned": self.pinned,
            "versions": [v.as_dict() for v in self.versions],
        }
        return described if self.gc is None else {**described, "gc": self.gc}


def gc_would_free(root: str, policy: RetentionPolicy) -> dict:
    """What `gc` with `policy` would do now (reads only): for inspect and the Asset event."""
    from .retention import plan

    planned = plan(root, policy)
    return {
        "keep_last": policy.keep_last,
        "keep_days": policy.keep_days,
        "min_age_seconds": policy.min_age_seconds,
        "retire": planned.retired,
        "remove": planned.removed_unpublished,
        "bytes": planned.bytes_freed,
        "files": len(planned.files_deleted),
    }


def _validation(report: dict | None, manifest_sha256: str | None) -> ValidationSummary | None:
    if report is None:
        return None
    return ValidationSummary(
        ok=bool(report.get("ok")),
        checked_at=(report.get("run") or {}).get("checked_at"),
        error_count=int(report.get("error_count") or 0),
        current=manifest_sha256 is not None and report.get("manifest_sha256") == manifest_sha256,
    )


def _logical_date(version_id: str, record: dict | None) -> str | None:
    if record is not None:
        return record_order(version_id, record)[0] or None
    moment = timestamp_in_id(version_id)
    return iso_utc(moment) if moment else None


def describe_version(
    version: Version, record: dict | None, latest: str | None, read_manifest: bool = False
) -> VersionDescription:
    """A version of a root (`record`: its publish record, None if unpublished; `latest`: what LATEST names)."""
    assert version.id is not None, "a version of a dataset root"
    storage = version.storage
    report = version.read_validation()
    manifest = None
    if record is not None:  # published: sealed, its counts on record, validated for that manifest
        if read_manifest:
            manifest = version.read_manifest()
        validation = _validation(report, record.get("manifest_sha256"))
        state = VersionState.LATEST if version.id == latest else VersionState.PUBLISHED
        return VersionDescription(
            version.id,
            version.uri,
            state,
            version.id == latest,
            True,
            True,
            False,
            record.get("samples"),
            record.get("shards"),
            record.get("bytes"),
            _logical_date(version.id, record),
            record.get("published_at"),
            validation,
            record.get("parent"),
            record.get("bytes_stored", record.get("bytes")),
            manifest,
            report,
            record,
            record.get("index_layers"),
            record.get("index_layer_bytes"),
        )
    data, _ = version.read_manifest_bytes()
    digest = None if data is None else hashlib.sha256(data).hexdigest()
    manifest = None if data is None else Manifest.from_json(data)
    validation = _validation(report, digest)
    commit_pending = storage.exists(version.journal_uri)
    sealed = manifest is not None and version.is_sealed()  # the seal never comes without a manifest
    if storage.exists(version.retired_uri):
        state = VersionState.RETIRED
    elif manifest is not None:
        if sealed:
            state = VersionState.SEALED
        elif validation is None or not validation.current:
            state = VersionState.COMMITTED
        else:
            state = VersionState.VALID if validation.ok else VersionState.INVALID
    elif commit_pending or version.written_by_us():
        state = VersionState.NOT_COMMITTED
    elif any(name.endswith(".tar") for name in storage.list_sizes(version.uri)):
        state = VersionState.FOREIGN
    else:
        state = VersionState.EMPTY
    return VersionDescription(
        version.id,
        version.uri,
        state,
        False,
        False,
        sealed,
        commit_pending,
        None if manifest is None else manifest.samples,
        None if manifest is None else len(manifest.shards),
        None if manifest is None else manifest.bytes,
        _logical_date(version.id, None),
        None,
        validation,
        None if manifest is None else manifest.parent,
        None if manifest is None else sum(shard.bytes for shard in manifest.own_shards),
        manifest,
        report,
        None,
        None if manifest is None else len(manifest.sample_index_layers),
        None if manifest is None else sum(layer.bytes for layer in manifest.sample_index_layers),
    )


def describe_root(root: str, retention: RetentionPolicy | None = None) -> RootDescription:
    """Every version of the root (oldest first) and LATEST; InputError where no dataset is.
    `retention`: also what a gc with that policy would free (a plan: it reads every version's files' sizes)."""
    dataset = Dataset(root)
    listing = RootListing.read(dataset)
    if not listing.ids and not listing.records and not dataset.storage.exists(dataset.root):
        raise InputError(f"{root}: no dataset there (no versions/, no published versions)")
    gc = None if retention is None else gc_would_free(root, retention)
    return RootDescription(dataset.root, listing.latest, listing.describe(), gc, dataset.pinned_ids())


def describe(root: str) -> dict:
    """`describe_root` in its JSON form (`inspect --json`)."""
    return describe_root(root).as_dict()


def format_description(description: RootDescription | dict) -> str:
    """`inspect`'s text: one line a version, oldest first, LATEST marked with '*', its state last."""
    from ..format.sizes import format_size

    if isinstance(description, RootDescription):
        description = description.as_dict()
    latest = description["latest"] or "none (nothing published)"
    pinned = set(description.get("pinned", ()))
    lines = [f"{description['root']}  LATEST={latest}"]
    for v in description["versions"]:
        counts = (
            f"{v['shards']} shards, {v['samples']} samples, {format_size(v['bytes'])}"
            if v["samples"] is not None
            else "-"
        )
        notes = []
        if v["state"] == VersionState.INVALID.value:
            notes.append(f"{v['validation_errors']} errors")
        if v["validated"] is not None and v["validation_current"] is False and not v["published"]:
            notes.append("validated for another manifest")
        if v["version"] in pinned:
            notes.append("pinned")
        if v["commit_pending"]:
            notes.append("a commit pending")
        if v.get("parent"):
            notes.append(
                f"on {v['parent']}: {format_size(v['bytes_stored'])} stored, {format_size(v['bytes_referenced'])} referenced"
            )
        if v.get("index_layers"):
            notes.append(f"index over {v['index_layers']} layer(s) of ancestors, {format_size(v['index_layer_bytes'])}")
        state = v["state"] + (f" ({'; '.join(notes)})" if notes else "")
        marker = "*" if v["version"] == description["latest"] else " "
        date = v["logical_date"] or "-"
        lines.append(f" {marker} {v['version']:<24} {date:<21} {counts:<48} {state}")
    gc = description.get("gc")
    if gc is not None:
        going = [f"retire {', '.join(gc['retire'])}"] if gc["retire"] else []
        going += [f"remove {', '.join(gc['remove'])}"] if gc["remove"] else []
        lines.append(
            f"gc --keep-last {gc['keep_last']} would free {format_size(gc['bytes'])} in {gc['files']} file(s)"
            + (f": {'; '.join(going)}" if going else "")
        )
    return "\n".join(lines)
