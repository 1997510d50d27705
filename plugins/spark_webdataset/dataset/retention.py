"""Retention: `gc` retires old published versions and removes dead unpublished ones; pins protect.

Kept, never touched: LATEST; pinned versions (`ROOT/_pins/<id>`); the newest `keep_last` published
versions in publish order (`layout.record_order`, LATEST's order); those published within
`keep_days`; every version younger than `min_age` (a published one by its record's `published_at`,
for readers that resolved it; an unpublished one by the newest file in its directory, so a committed
version waiting for validation and publish stays); a version with a live job's staging
(`staging.live_jobs`); a directory of foreign tars (nothing of ours in it).

Everything else goes, in this order, so that a gc killed anywhere leaves every kept version readable
and a rerun finishes the job:

1. plan from the listings (nothing is written; `dry_run` and `plan` stop here);
2. per version going: `_RETIRED` is written into its directory (publish refuses such a version from
   then on, and a rerun knows the decision was made), then LATEST and its pin are read again (set or
   pinned since the plan: the mark goes again and the version stays); a published version's publish
   record is deleted: it is invisible from here on. An unpublished version's record is looked for
   instead: publish creates its record and then looks for the mark, gc marks and then looks for the
   record, so one of them sees the other and a version is never both published and being removed;
3. then, version by version, its files: shards first, then the rest (sample index, shardindex.json,
   dead staging, lock, journal), then `_manifest.json`, `_validation.json`, `_SEALED`, `_WEBDATASET`
   and `_RETIRED` last. Shards first: a directory never holds tars without the manifest that says
   which are committed (it would read as a plain directory of tars). `_RETIRED` last: until the
   directory is gone a rerun removes it without asking its age again.

A shard or a sample index layer that a kept version references (its manifest's entry names the
retired version) stays, with
what proves it later and keeps it immutable: the retired version's `_manifest.json`, `_validation.json`
(a kept child's validation proves the shard by it), `_SEALED` (no writer may touch the directory),
`_WEBDATASET` and `_RETIRED`. The whole directory goes once nothing references it.

Nothing a kept version reads is ever deleted: its directory, its record, LATEST, and the shards it
references with their proof. Killed at any point, a rerun plans again from storage: a version whose
record is still there is decided again (retired, or kept now: its mark goes), one with `_RETIRED` is
removed, and deleting what is already gone is fine, so an interrupted gc and its rerun end in the
state one uninterrupted gc leaves.
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass, field

from .. import fault_points
from ..errors import BadOption, InputError, RetentionRefused
from ..storage import Storage
from .layout import Dataset
from .ordering import iso_utc, parse_logical_date, record_order
from .paths import check_dataset_root, check_version_id
from .staging import live_jobs
from .tree import MANIFEST_NAME, PUBLISHED_DIR, RETIRED_NAME, SEAL_NAME, VALIDATION_NAME, WRITER_MARK_NAME

DEFAULT_MIN_AGE_SECONDS = 24 * 3600.0
RETIRED_KIND = "spark-webdataset-retired-v1"
PIN_KIND = "spark-webdataset-pin-v1"
# What a retired directory keeps while a kept version references some of its shards, and the order in
# which a directory's last files go (the mark of a decided removal last).
PROOF_FILES = (MANIFEST_NAME, VALIDATION_NAME, SEAL_NAME, WRITER_MARK_NAME, RETIRED_NAME)


@dataclass(frozen=True)
class RetentionPolicy:
    """Which versions gc keeps (besides LATEST, pins and live jobs, which it always keeps)."""

    keep_last: int
    keep_days: float | None = None
    min_age_seconds: float = DEFAULT_MIN_AGE_SECONDS

    def __post_init__(self) -> None:
        if not isinstance(self.keep_last, int) or self.keep_last < 1:
            raise BadOption(
                f"keep_last {self.keep_last!r} must be a whole number of at least 1 (LATEST is always kept)"
            )
        if self.keep_days is not None and self.keep_days < 0:
            raise BadOption(f"keep_days {self.keep_days!r} must not be negative")
        if self.min_age_seconds < 0:
            raise BadOption(f"min_age {self.min_age_seconds!r} s must not be negative")


@dataclass
class GcReport:
    """What a gc retired, removed and kept (and why), and what it deleted; `plan` fills the same
    fields with what gc would do (`dry_run`)."""

    root: str
    dry_run: bool
    retired: list[str] = field(default_factory=list)  # published versions whose record went
    removed_unpublished: list[str] = field(default_factory=list)
    kept: dict[str, list[str]] = field(default_factory=dict)  # version -> why it is kept
    still_referenced: dict[str, list[str]] = field(default_factory=dict)  # gone version -> shards kept for others
    files_deleted: list[str] = field(default_factory=list)
    bytes_freed: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def summary(self) -> str:
        """The CLI's text: one line a version, then the bytes."""
        from ..format.sizes import format_size

        lines = [f"gc {self.root}" + (" (dry run: nothing changed)" if self.dry_run else "")]
        gone = set(self.retired) | set(self.removed_unpublished)
        for version, held in self.still_referenced.items():
            if version not in gone:
                lines.append(f" held     {version} (retired; {len(held)} file(s) stay: kept versions reference them)")
        for version in self.retired:
            held = self.still_referenced.get(version)
            note = f" ({len(held)} file(s) stay: kept versions reference them)" if held else ""
            lines.append(f" retired  {version}{note}")
        for version in self.removed_unpublished:
            held = self.still_referenced.get(version)
            note = f" ({len(held)} file(s) stay: kept versions reference them)" if held else ""
            lines.append(f" removed  {version} (unpublished){note}")
        for version, reasons in self.kept.items():
            lines.append(f" kept     {version} ({', '.join(reasons)})")
        verb = "would free" if self.dry_run else "freed"
        lines.append(
            f"{verb} {format_size(self.bytes_freed)} ({self.bytes_freed} bytes) in {len(self.files_deleted)} file(s)"
        )
        return "\n".join(lines)


@dataclass
class _Removal:
    """One version going: its files to delete (relative to its directory, in deletion order)."""

    version: str
    published: bool
    stored: bool  # it has a directory (a record may outlive one)
    record_bytes: int
    listing: dict[str, int]  # every file of its directory: relative path -> size
    directories: list[str]  # below the version directory, deepest first (local disk removes them empty)
    held: list[str]  # its shards and index layers that kept versions reference: they stay, with PROOF_FILES

    @property
    def whole(self) -> bool:
        """Nothing of it stays."""
        return not self.held

    @property
    def files(self) -> dict[str, int]:
        """What goes, in the order it goes: the plan (`gc --dry-run`) and the run delete this list, so
        both count the same files. A whole stored directory's `_RETIRED` is in it even before gc wrote
        it (`_retire` writes it, `_delete_files` removes it last)."""
        stays = set(self.held) | set(PROOF_FILES) if self.held else set()
        listing = dict(self.listing)
        if self.whole and self.stored:
            listing.setdefault(RETIRED_NAME, 0)
        ordered = sorted(listing.items(), key=lambda item: _deletion_rank(item[0]))
        return {path: size for path, size in ordered if path not in stays}


def _epoch(moment: float | datetime.datetime | None) -> float:
    if moment is None:
        return time.time()
    return moment.timestamp() if isinstance(moment, datetime.datetime) else float(moment)


def _published_at(record: dict) -> float | None:
    text = record.get("published_at")
    try:
        return parse_logical_date(text).timestamp() if text else None
    except Exception:  # a record we cannot date is treated as young: kept
        return None


def _listing(storage: Storage, uri: str, prefix: str = "") -> tuple[dict[str, int], list[str]]:
    """Every object below `uri` (path relative to it -> size) and every directory below it, deepest first."""
    files = {prefix + name: size for name, size in storage.list_sizes(uri).items()}
    directories: list[str] = []
    for name in storage.list_dirs(uri):
        inner, deeper = _listing(storage, storage.join(uri, name), f"{prefix}{name}/")
        files.update(inner)
        directories += deeper + [f"{prefix}{name}"]
    return files, directories


def _deletion_rank(path: str) -> tuple[int, str]:
    """Shards first, then what is neither shard nor proof, then the proof files in PROOF_FILES' order."""
    if path in PROOF_FILES:
        return 2 + PROOF_FILES.index(path), path
    return (0 if "/" not in path and path.endswith(".tar") else 1), path


def _decide(dataset: Dataset, policy: RetentionPolicy, now: float) -> tuple[dict, dict, set[str], list[str]]:
    """(records, kept version -> reasons, versions retired by an earlier gc, version directories)."""
    storage = dataset.storage
    records = {v: r for v in dataset.published_ids() if (r := dataset.read_record(v)) is not None}
    latest = dataset.read_latest()
    pins = set(dataset.pinned_ids())
    directories = dataset.version_ids()
    if not directories and not records and latest is None:
        # bad input (exit 2), as inspect's and validate's "nothing there": no retry finds a dataset
        raise InputError(f"{dataset.root}: no dataset there (no versions/, no published versions, no LATEST)")
    kept: dict[str, list[str]] = {}

    def keep(version: str, why: str) -> None:
        kept.setdefault(version, []).append(why)

    if latest is not None:
        keep(latest, "latest")
    for version in sorted(pins & (set(records) | set(directories))):
        keep(version, "pinned")
    by_order = sorted(records, key=lambda v: record_order(v, records[v]))
    for version in by_order[-policy.keep_last :]:
        keep(version, f"newest {policy.keep_last}")
    for version in by_order:
        published_at = _published_at(records[version])
        age = None if published_at is None else now - published_at
        if age is None or age < policy.min_age_seconds:
            keep(version, "younger than min-age")
        if policy.keep_days is not None and age is not None and age < policy.keep_days * 86400:
            keep(version, f"published within {policy.keep_days:g} days")
    marked = set()
    for version_id in directories:
        if version_id in records or version_id in kept:
            continue
        version = dataset.version(version_id)
        if storage.exists(version.retired_uri):
            marked.add(version_id)  # an earlier gc decided: no age asked again
            continue
        jobs = live_jobs(version)  # liveness is about the real clock, whatever `now` a caller plans for
        if jobs:
            keep(version_id, f"live job {', '.join(jobs)}")
            continue
        names = storage.list_sizes(version.uri)
        if not {MANIFEST_NAME, WRITER_MARK_NAME, SEAL_NAME} & set(names) and any(n.endswith(".tar") for n in names):
            keep(version_id, "foreign tars (not written by spark-webdataset)")
            continue
        newest = storage.newest_modification(version.uri)
        if newest is not None and now - newest < policy.min_age_seconds:
            keep(version_id, "younger than min-age")
    return records, kept, marked, directories


def _referenced(dataset: Dataset, kept: dict[str, list[str]], directories: list[str]) -> dict[str, set[str]]:
    """Files of other versions that kept versions reference: version that stores them -> paths in its
    directory (shard names, and the sample index layers a kept version reads through)."""
    needed: dict[str, set[str]] = {}
    present = set(directories)
    for version_id in kept:
        if version_id not in present:
            continue
        manifest = dataset.version(version_id).read_manifest()
        for entry in manifest.shards if manifest is not None else ():
            if entry.version is not None:
                needed.setdefault(entry.version, set()).add(entry.name)
        for layer in manifest.sample_index_layers if manifest is not None else ():
            needed.setdefault(layer.version, set()).add(layer.path)
    return needed


def _plan(root: str, policy: RetentionPolicy, now: float) -> tuple[GcReport, list[_Removal]]:
    check_dataset_root(root)
    dataset = Dataset(root)
    storage = dataset.storage
    records, kept, marked, directories = _decide(dataset, policy, now)
    needed = _referenced(dataset, kept, directories)
    record_sizes = storage.list_sizes(storage.join(dataset.root, PUBLISHED_DIR)) if records else {}
    report = GcReport(dataset.root, dry_run=True, kept=kept)
    removals = []
    # published versions first (their records go before any file), oldest first; then the unpublished
    going = sorted((v for v in records if v not in kept), key=lambda v: record_order(v, records[v]))
    going += sorted(v for v in directories if v not in records and v not in kept)
    for version_id in going:
        version = dataset.version(version_id)
        files, subdirectories = _listing(storage, version.uri) if version_id in directories else ({}, [])
        published = version_id in records
        removal = _Removal(
            version_id, published, version_id in directories, record_sizes.get(f"{version_id}.json", 0) if published else 0,
            files, subdirectories, sorted(needed.get(version_id, set()) & set(files)),
        )  # fmt: skip
        doomed = removal.files
        if removal.held:
            report.still_referenced[version_id] = removal.held
        if not published and not doomed and removal.held:
            continue  # retired earlier, and what is left is held by kept versions: nothing to do
        removals.append(removal)
        (report.retired if published or version_id in marked else report.removed_unpublished).append(version_id)
        if published:
            report.files_deleted.append(dataset.record_uri(version_id))
        report.files_deleted += [storage.join(version.uri, path) for path in doomed]
        report.bytes_freed += removal.record_bytes + sum(doomed.values())
    return report, removals


def plan(root: str, policy: RetentionPolicy, *, now: float | datetime.datetime | None = None) -> GcReport:
    """What `collect` would retire, remove and free (reads only): for `gc --dry-run`, inspect and the
    Asset event."""
    return _plan(root, policy, _epoch(now))[0]


def collect(
    root: str, policy: RetentionPolicy, *, dry_run: bool = False, now: float | datetime.datetime | None = None
) -> GcReport:
    """Retire and remove what `policy` does not keep (see the module's docstring for the order and why
    it is crash safe); `dry_run` changes no byte. `now` (epoch seconds or a datetime): the moment
    ages are measured from (tests; default the clock)."""
    planned, removals = _plan(root, policy, _epoch(now))
    if dry_run:
        return planned
    fault_points.point("gc:planned", root=root)  # tests: a pin or LATEST set between the plan and the re-read
    dataset = Dataset(root)
    report = GcReport(dataset.root, dry_run=False, kept=planned.kept)
    _unmark_kept(dataset, planned.kept)
    going = [removal for removal in removals if _retire(dataset, removal, report)]
    for removal in going:
        (report.retired if removal.version in planned.retired else report.removed_unpublished).append(removal.version)
    if len(going) < len(removals):  # kept after all (LATEST set back, pinned): what it references stays too
        needed = _referenced(dataset, report.kept, dataset.version_ids())
        for removal in going:
            removal.held = sorted(needed.get(removal.version, set()) & set(removal.listing))
            if removal.held:
                planned.still_referenced[removal.version] = removal.held
    for removal in going:
        _delete_files(dataset, removal, report)
    report.still_referenced = planned.still_referenced
    return report


def _retire(dataset: Dataset, removal: _Removal, report: GcReport) -> bool:
    """Step 2 for one version: mark it, check again, delete its record. False: it stays after all."""
    storage = dataset.storage
    version = dataset.version(removal.version)
    # the same bytes from every gc: an interrupted gc and its rerun leave what one gc leaves
    mark = (json.dumps({"__kind__": RETIRED_KIND, "version": removal.version}) + "\n").encode()
    if removal.stored and not storage.exists(version.retired_uri):
        storage.write_atomic(version.retired_uri, mark)
    fault_points.point("gc:marked", version=removal.version)
    if dataset.read_latest() == removal.version or storage.exists(dataset.pin_uri(removal.version)):
        storage.delete(version.retired_uri)  # LATEST set back to it, or pinned, since the plan
        report.kept.setdefault(removal.version, []).append("latest or pinned while gc ran")
        return False
    if removal.published:
        storage.delete(dataset.record_uri(removal.version))
        report.files_deleted.append(dataset.record_uri(removal.version))
        report.bytes_freed += removal.record_bytes
        fault_points.point("gc:record-deleted", version=removal.version)
        return True
    if dataset.read_record(removal.version) is not None:  # a publish won the race: it stays published
        storage.delete(version.retired_uri)
        report.kept.setdefault(removal.version, []).append("published while gc ran")
        return False
    return True


def _unmark_kept(dataset: Dataset, kept: dict[str, list[str]]) -> None:
    """A version an interrupted gc marked but that is kept now (pinned, LATEST set back) loses its mark."""
    for version_id in kept:
        version = dataset.version(version_id)
        if dataset.storage.exists(version.retired_uri):
            dataset.storage.delete(version.retired_uri)


def _delete_files(dataset: Dataset, removal: _Removal, report: GcReport) -> None:
    """Step 3 for one version: its files in deletion order; a whole directory's mark last."""
    storage = dataset.storage
    version = dataset.version(removal.version)
    files = removal.files  # in deletion order; a whole directory's `_RETIRED` (written by `_retire`) last
    for path in files:
        uri = storage.join(version.uri, path)
        storage.delete(uri)
        report.files_deleted.append(uri)
        report.bytes_freed += files[path]
        if path.endswith(".tar") and "/" not in path:
            fault_points.point("gc:shard-deleted", version=removal.version)
        elif path == MANIFEST_NAME:
            fault_points.point("gc:manifest-deleted", version=removal.version)
    for directory in removal.directories:
        storage.remove_empty_dir(storage.join(version.uri, directory))
    if removal.whole and removal.stored:
        storage.remove_empty_dir(version.uri)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


# -- pins --------------------------------------------------------------------


def pin(root: str, version: str, *, by: str | None = None, reason: str | None = None) -> None:
    """Pin `version`: gc never retires or removes it until `unpin`. It must exist and not be retired."""
    dataset = Dataset(root)
    check_version_id(version)
    target = dataset.version(version)
    storage = dataset.storage
    published = dataset.read_record(version) is not None
    if not published and storage.exists(target.retired_uri):  # (still published: gc was interrupted; the pin wins)
        raise RetentionRefused(f"{dataset.root}: version {version!r} was retired by gc; it cannot be pinned")
    if not published and not storage.list_sizes(target.uri):
        raise RetentionRefused(
            f"{dataset.root}: no version {version!r} to pin (published: {', '.join(dataset.published_ids()) or 'none'})"
        )
    body = {"__kind__": PIN_KIND, "version": version, "by": by, "reason": reason, "at": iso_utc(_now())}
    storage.write_atomic(dataset.pin_uri(version), (json.dumps(body) + "\n").encode())


def unpin(root: str, version: str) -> bool:
    """Remove `version`'s pin; False if it was not pinned."""
    dataset = Dataset(root)
    uri = dataset.pin_uri(version)
    if not dataset.storage.exists(uri):
        return False
    dataset.storage.delete(uri)
    return True
