"""A dataset on storage: the one module that knows its names and paths.

    <root>/versions/<version>/shard-000000.tar …   shards
    <root>/versions/<version>/_manifest.json       the truth about the directory (written last)
    <root>/versions/<version>/_validation.json     validation's report
    <root>/versions/<version>/shardindex.json      the wids index, written by publish
    <root>/versions/<version>/_SEALED              publish's seal: no writer may touch it again
    <root>/versions/<version>/_WEBDATASET          our writer's mark, from the first staged byte on
    <root>/versions/<version>/_staging/<job>/      per-attempt staging of live jobs
    <root>/versions/<version>/_index/              the sample index (one file, replaced at each commit)
    <root>/versions/<version>/_RETIRED             gc retired it: never published again (retention.py)
    <root>/_published/<version>.json               the commit point: visible iff it exists
    <root>/LATEST                                  newest published version
    <root>/_latest_changes.json                    LATEST set by hand: by whom, when, from what
    <root>/_pins/<version>                         a pinned version: gc never retires it

Everything else (writer, reader, validate, publish, catalog, jobs, CLI,
DAGs) asks a `Dataset` or a `Version` for these paths.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Iterable

from ..errors import InputError, InvalidVersionId, ManifestChanged, NestedDatasetRoot, NotCommitted, VersionSealed
from ..format.manifest import Manifest, ShardEntry
from ..format.names import control_error
from ..storage import Storage, storage_for

VERSIONS_DIR = "versions"
PUBLISHED_DIR = "_published"
LATEST_NAME = "LATEST"
LATEST_CHANGES_NAME = "_latest_changes.json"  # who set LATEST by hand, and when
MANIFEST_NAME = "_manifest.json"
VALIDATION_NAME = "_validation.json"
SHARD_INDEX_NAME = "shardindex.json"
SEAL_NAME = "_SEALED"
WRITER_MARK_NAME = "_WEBDATASET"
STAGING_DIR = "_staging"
SAMPLE_INDEX_DIR = "_index"
COMMIT_LOCK_NAME = "_commit.lock"
COMMIT_JOURNAL_NAME = "_commit.json"
RETIRED_NAME = "_RETIRED"  # gc retired the version: publish refuses it, a gc rerun finishes removing it
PINS_DIR = "_pins"  # ROOT/_pins/<version>: gc never retires a pinned version
# Files of a version directory that are not shards.
METADATA_FILES = frozenset(
    {
        MANIFEST_NAME,
        VALIDATION_NAME,
        SHARD_INDEX_NAME,
        SEAL_NAME,
        WRITER_MARK_NAME,
        COMMIT_LOCK_NAME,
        COMMIT_JOURNAL_NAME,
        RETIRED_NAME,
    }
)
WRITER_MARK = b'{"__kind__": "spark-webdataset-directory-v1"}\n'
SHARD_PATTERN = "shard-{:06d}.tar"  # contiguous: shard-{000000..000041}.tar works
LEASE_NAME = "_lease.json"  # in _staging/<job>/: which driver owns the job's staging
STAGED_SHARD_PATTERN = "{:06d}.tar"  # a task attempt's n-th shard, in its staging directory
STAGED_INDEX_NAME = "index.arrow"  # a task attempt's sorted sample index rows, in its staging directory
_SHARD_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,250}\.tar", re.ASCII)


def shard_name(index: int) -> str:
    return SHARD_PATTERN.format(index)


def is_shard_name(name: str) -> bool:
    """A name our writer gives shards (files of other names in a version directory are not ours)."""
    return name.startswith("shard-") and name.endswith(".tar")


def shard_number(name: str) -> int | None:
    """The number in a name `shard_name` gave (None for any other name, `shard-².tar` too: ASCII digits only)."""
    digits = name[len("shard-") : -len(".tar")] if is_shard_name(name) else ""
    return int(digits) if digits.isascii() and digits.isdigit() else None


def staged_shard_name(sequence: int) -> str:
    return STAGED_SHARD_PATTERN.format(sequence)


def staged_sample_index_name(serial: int) -> str:
    """The merged sample index a commit stages in its job's directory before naming it `sample_index_path(serial)`."""
    return f"index-{serial:06d}.parquet"


def sample_index_path(serial: int) -> str:
    """A version's sample index, relative to the version directory (the manifest's `sample_index`)."""
    return f"{SAMPLE_INDEX_DIR}/{serial:06d}.parquet"


def sample_index_serial(path: str) -> int:
    """The serial of a sample index, committed (`_index/000003.parquet`) or staged (`index-000003.parquet`)."""
    return int(path.rsplit("/", 1)[-1].split(".")[0].removeprefix("index-"))


def check_shard_name(name: object) -> str:
    """A plain file name of a tar in a version directory: no '/', no '..', no scheme (names from URLs)."""
    if not isinstance(name, str) or not _SHARD_FILE.fullmatch(name) or ".." in name:
        raise InputError(f"shard name {name!r} is not a shard file name ([A-Za-z0-9][A-Za-z0-9._-]*.tar, no '..')")
    return name

def check_shard_location(location: object) -> str:
    """A shard's location relative to a version directory: a shard file name, or `../<version id>/<name>`
    (a shard referenced from the version that stores it); anything else is refused."""
    if isinstance(location, str) and location.startswith("../") and location.count("/") == 2:
        _, stored_in, name = location.split("/")
        check_version_id(stored_in)
        check_shard_name(name)
        return location
    return check_shard_name(location)


VERSION_ID_RULE = "[A-Za-z0-9][A-Za-z0-9._-]{0,127}, and no '..'"
# Explicit ASCII ranges, and re.ASCII besides: no full-width digit, Cyrillic letter or other look-alike.
_VERSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", re.ASCII)
# Timestamps read from a version id when nothing better says when a version is from.
_ID_TIMESTAMPS = (
    (re.compile(r"(\d{8}T\d{6}Z)", re.ASCII), "%Y%m%dT%H%M%SZ"),
    (re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})", re.ASCII), "%Y-%m-%dT%H:%M:%S"),
    (re.compile(r"(\d{4}-\d{2}-\d{2})", re.ASCII), "%Y-%m-%d"),
    (re.compile(r"(?<!\d)(\d{8})(?!\d)", re.ASCII), "%Y%m%d"),
)

# What a path may be, checked before any storage call (an over-long name would otherwise reach
# the file system as ENAMETOOLONG, or a bucket as a 400): NAME_MAX and PATH_MAX of Linux.
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096
URI_RULE = (
    "a URI is a local path, file:// or SCHEME://BUCKET/PATH with no '..', '.' or empty path part "
    f"(a leading './' aside), no control character (C0, DEL), parts of at most {MAX_NAME_BYTES} bytes "
    f"and at most {MAX_PATH_BYTES} bytes in all"
)


def _shown(text: str, limit: int = 120) -> str:
    """`text` as a message shows it: repr, cut short (a 5,000-character path stays readable)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def normalize_uri(uri: object, what: str = "path") -> str:
    """The one spelling of a location (no trailing '/', local paths without file://), or InputError
    naming it and the rule (`URI_RULE`). Every entry point (Dataset, Version.at, the writer, the
    jobs, the CLI) goes through here first, so `ROOT/versions/..` never becomes ROOT."""
    if not isinstance(uri, str) or not uri:
        raise InputError(f"{what} {uri!r} is not a path: {URI_RULE}")
    if control_error(uri):
        raise InputError(f"{what} {_shown(uri)} holds a control character: {URI_RULE}")
    try:
        size = len(uri.encode("utf-8"))
    except UnicodeEncodeError:
        raise InputError(f"{what} {_shown(uri)} is not valid Unicode text (a lone surrogate): {URI_RULE}") from None
    if size > MAX_PATH_BYTES:
        raise InputError(f"{what} {_shown(uri)} is {size} bytes long: {URI_RULE}")
    text = uri[len("file://") :] if uri.startswith("file://") else uri
    if "://" in text:
        scheme, _, rest = text.partition("://")
        bucket, _, path = rest.partition("/")
        if not scheme or not bucket:
            raise InputError(f"{what} {_shown(uri)} names no scheme or bucket: {URI_RULE}")
        anchor, parts = f"{scheme}://{bucket}", path.split("/") if path else []
    elif text.startswith("/"):
        anchor, parts = "/", text[1:].split("/")
    else:
        anchor, parts = "", text.split("/")
    while parts and parts[-1] == "":
        parts.pop()  # trailing '/'s
    for position, part in enumerate(parts):
        if part in ("", "..") or (part == "." and (anchor or position > 0)):
            problem = "an empty path part ('//')" if not part else f"a {part!r} path part"
            raise InputError(f"{what} {_shown(uri)} has {problem}: {URI_RULE}")
        length = len(part.encode("utf-8"))
        if length > MAX_NAME_BYTES:
            raise InputError(f"{what} {_shown(uri)} has a path part of {length} bytes: {URI_RULE}")
    path = "/".join(parts)
    if anchor == "/":
        return "/" + path
    if anchor:
        return f"{anchor}/{path}" if path else anchor
    return path


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


def _normalized(uri: str) -> str:
    """One spelling of a location that is not a dataset's (a stream's checkpoint): no trailing '/',
    local paths without file://. Dataset and version paths go through `normalize_place`."""
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    return uri.rstrip("/") or "/"


def normalize_place(uri: object, what: str = "path") -> str:
    """`normalize_uri`, and a directory right under a `versions/` is a version: its name is an id
    by the rule (InvalidVersionId), never a plain directory named `.hidden`, `２０２６` or `v1а`."""
    uri = normalize_uri(uri, what)
    _, parts = _anchor_parts(uri)
    if len(parts) >= 2 and parts[-2] == VERSIONS_DIR:
        check_version_id(parts[-1])
    return uri


def _anchor_parts(uri: str) -> tuple[str, list[str]]:
    """A normalized URI's anchor ('gs://bucket', '/', '' for a relative path) and its path parts."""
    if "://" in uri:
        scheme, _, rest = uri.partition("://")
        bucket, _, path = rest.partition("/")
        return f"{scheme}://{bucket}", [part for part in path.split("/") if part]
    if uri.startswith("/"):
        return "/", [part for part in uri.split("/") if part]
    return "", uri.split("/")


def is_version_id(name: object) -> bool:
    """`name` is a version id by the rule (ASCII only; never '..')."""
    return isinstance(name, str) and _VERSION_ID.fullmatch(name) is not None and ".." not in name


def check_version_id(version: object) -> str:
    """Return `version` if it is a valid version id, else raise naming it and the rule."""
    if not is_version_id(version):
        shown = _shown(version) if isinstance(version, str) else repr(version)
        raise InvalidVersionId(f"version id {shown} breaks the rule {VERSION_ID_RULE} (ASCII only)")
    return version  # type: ignore[return-value]


ROOT_RULE = (
    "a dataset root may not lie inside another dataset's root or a version directory, nor hold another's root"
)
DIRECTORY_RULE = (
    "a write may not land inside a version directory, nor inside a dataset root but as ROOT/versions/VERSION, "
    "nor onto a dataset root"
)
# What shows a directory is a version: our writer's mark (from the first staged byte) and the
# manifest (from the first commit; the seal never comes without one). What shows a dataset root:
# LATEST, a publish record under _published/, or a version directory under versions/ (an
# unpublished root too). The two directories are marks when they hold something (gs:// has no
# empty directories): `_DIRECTORY_MARKS` are probed by listing, the others by `exists`.
_VERSION_MARKS = (MANIFEST_NAME, WRITER_MARK_NAME)
_ROOT_MARKS = (LATEST_NAME, PUBLISHED_DIR, VERSIONS_DIR)
_DIRECTORY_MARKS = {PUBLISHED_DIR: "files", VERSIONS_DIR: "directories"}


def absolute_uri(uri: str, what: str = "path") -> str:
    """`normalize_place`, a local path made absolute: what a job hands Spark, whose driver (a
    Spark Connect server, a JVM started elsewhere) resolves a relative path against its own cwd."""
    return _location(normalize_place(uri, what))


def _location(uri: str) -> str:
    """A URI spelt for comparing places: normalized, a local path absolute."""
    uri = normalize_place(uri)
    return uri if "://" in uri else os.path.normpath(os.path.abspath(uri))


def _compared_location(uri: str) -> str:
    """`_location` without the URI rule: a spelling to compare two configs' roots by."""
    uri = _normalized(uri)
    return uri if "://" in uri else os.path.normpath(os.path.abspath(uri))


def _split_location(location: str) -> tuple[str, list[str]]:
    """('gs://bucket', ['a', 'b']) for gs://bucket/a/b, ('/', ['tmp', 'x']) for /tmp/x."""
    if "://" in location:
        scheme, _, rest = location.partition("://")
        bucket, _, path = rest.partition("/")
        return f"{scheme}://{bucket}", [part for part in path.split("/") if part]
    return "/", [part for part in location.split("/") if part]


def _below(inner: str, outer: str) -> list[str] | None:
    """The components of `inner` under `outer` when it lies strictly inside it, else None."""
    inner_anchor, inner_parts = _split_location(inner)
    outer_anchor, outer_parts = _split_location(outer)
    if inner_anchor != outer_anchor or len(inner_parts) <= len(outer_parts):
        return None
    return inner_parts[len(outer_parts) :] if inner_parts[: len(outer_parts)] == outer_parts else None


def _refused(what: str, uri: str, enclosing: str, how: str) -> NestedDatasetRoot:
    rule = ROOT_RULE if what == "dataset root" else DIRECTORY_RULE
    error = NestedDatasetRoot(f"{what} {uri} {how}: {rule}")
    error.root, error.enclosing = uri, enclosing
    return error


def _holds(storage: Storage, directory: str, name: str) -> bool:
    """`directory` holds the mark `name`: a file, or a directory with something in it."""
    path = storage.join(directory, name)
    kind = _DIRECTORY_MARKS.get(name)
    if kind == "files":
        return bool(storage.list_sizes(path))
    if kind == "directories":
        return bool(storage.list_dirs(path))
    return storage.exists(path)


def _probe(storage: Storage, probes: list[tuple[str, str]]) -> list[bool]:
    """`_holds` of each probe: at once where a call is latency-bound (more than one rename thread)."""
    threads = min(len(probes), getattr(storage, "rename_threads", 1))
    if threads <= 1:
        return [_holds(storage, directory, name) for directory, name in probes]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="root-check") as pool:
        return list(pool.map(lambda probe: _holds(storage, *probe), probes))


def _shown_mark(name: str) -> str:
    return f"{name}/" if name in _DIRECTORY_MARKS else name


def _check_enclosing(
    uri: str, what: str, known: Iterable[str], look: bool, itself: bool, target: bool = False
) -> str:
    """`itself`: the place may not be a version directory; `target`: nor a dataset root (a write's
    target: it writes a version, never onto a root)."""
    # Without `look` (the config loader comparing a folder's roots) only places are compared: a path
    # that breaks URI_RULE is refused where it is used (Dataset, the jobs, the tasks), not here.
    place = _location if look else _compared_location
    here = place(uri)
    for other in known:
        there = place(other)
        below = _below(here, there)
        if below is not None:
            if below[0] == VERSIONS_DIR and len(below) > 1:
                how = f"lies inside version {below[1]!r} of dataset {other}"
            else:
                how = f"lies inside the root of dataset {other}"
            raise _refused(what, uri, other, how)
        if _below(there, here) is not None:
            raise _refused(what, uri, other, f"holds the root of dataset {other}")
    if not look:
        return here
    anchor, parts = _split_location(here)
    # the place, then each directory above it up to the bucket or /
    levels = [anchor.rstrip("/") + "/" + "/".join(parts[:n]) for n in range(len(parts), 0, -1)] + [anchor]
    probes = [(here, name) for name in _VERSION_MARKS] if itself else []
    probes += [(here, name) for name in _ROOT_MARKS] if target else []
    probes += [(level, name) for level in levels[1:] for name in (*_VERSION_MARKS, *_ROOT_MARKS)]
    storage = storage_for(here)
    found = _probe(storage, probes)
    for (directory, name), hit in zip(probes, found):  # the nearest first
        if not hit:
            continue
        mark = _shown_mark(name)
        if directory == here and name in _ROOT_MARKS:
            how = f"is itself a dataset root (it holds {mark}); write a version of it, ROOT/versions/VERSION"
            raise _refused(what, uri, here, how)
        if directory == here:
            raise _refused(what, uri, here, f"is itself a version directory (it holds {mark})")
        if name in _ROOT_MARKS:
            how = f"lies inside the root of dataset {directory} (it holds {mark})"
            raise _refused(what, uri, directory, how)
        try:
            version = Version.at(directory)
        except InputError:  # a directory under versions/ that no id names: still a version's place
            version = Version(directory)
        if version.dataset is not None:
            how = f"lies inside version {version.id!r} of dataset {version.dataset.root} (it holds {mark})"
        else:
            how = f"lies inside the version directory {directory} (it holds {mark})"
        raise _refused(what, uri, directory, how)
    return here


def _check_not_a_root(uri: str) -> None:
    """A write's target that is itself a dataset root (it holds LATEST, _published/ or versions/)."""
    here = _location(uri)
    storage = storage_for(here)
    probes = [(here, name) for name in _ROOT_MARKS]
    for (_, name), hit in zip(probes, _probe(storage, probes)):
        if hit:
            how = f"is itself a dataset root (it holds {_shown_mark(name)}); write a version of it, ROOT/versions/VERSION"
            raise _refused("directory", uri, here, how)


def check_dataset_root(root: str, known: Iterable[str] = (), *, look: bool = True) -> str:
    """Refuse `root` as a dataset root if it lies inside another dataset or a version; return its place.

    The one rule every entry point asks (the writer through `Version.check_writable`, the jobs,
    publish, the DAGs' tasks and the config loader): no dataset root inside another dataset's
    root or inside a version directory. `known`: roots of other datasets (a folder's configs),
    compared by path only, either way round. `look`: also ask storage whether the root itself
    holds a version's files, or a directory above it a version's files or a root's (LATEST, a
    record under _published/, a directory under versions/): two `exists` calls for the root,
    three and two listings per directory above it (at once on gs://). Raises InputError for a
    path `normalize_uri` refuses, NestedDatasetRoot naming the root, what encloses it and the rule.
    """
    return _check_enclosing(root, "dataset root", known, look, itself=True)


def timestamp_in_id(version: str) -> datetime.datetime | None:
    """A UTC timestamp spelled in the id (20261201T000000Z, 2026-12-01, 20261201), if any."""
    for pattern, layout in _ID_TIMESTAMPS:
        match = pattern.search(version)
        if match:
            try:
                moment = datetime.datetime.strptime(match.group(1), layout)
            except ValueError:
                continue
            return moment.replace(tzinfo=datetime.timezone.utc)
    return None


def iso_utc(moment: datetime.datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def natural_order(version: str) -> tuple:
    """Digits compare as numbers, so v10 follows v9."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.findall(r"\d+|\D+", version))


def version_order(version: str) -> tuple:
    """Order of version ids by the timestamp they spell (ids without one sort first), then naturally."""
    moment = timestamp_in_id(version)
    return (iso_utc(moment) if moment else "", natural_order(version))


def record_order(version: str, record: dict | None) -> tuple:
    """Where a published version stands for LATEST: (logical date, version id in natural order).
    The logical date is its publish record's, else the timestamp its id spells, else when it was published."""
    logical = (record or {}).get("logical_date")
    if not logical:
        moment = timestamp_in_id(version)
        logical = iso_utc(moment) if moment else (record or {}).get("published_at", "")
    return str(logical), natural_order(version)


def version_sort_key(version: str, record: dict | None) -> tuple:
    """The one order of a root's versions (oldest first): a published version by `record_order`,
    any other by `version_order` (the timestamp its id spells)."""
    return record_order(version, record) if record is not None else version_order(version)


def parse_logical_date(text: str) -> datetime.datetime:
    """An ISO-8601 date or date-time (naive means UTC)."""
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidVersionId(f"logical date {text!r} is not ISO-8601 (e.g. 2026-11-15T00:00:00Z)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


@dataclass(frozen=True)
class Dataset:
    """A dataset root: its versions, publish records and LATEST."""

    root: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", normalize_place(self.root, "dataset root"))

    @functools.cached_property
    def storage(self) -> Storage:
        return storage_for(self.root)

    def version(self, version: str) -> "Version":
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
            name
            for name in self.storage.list_dirs(self.storage.join(self.root, VERSIONS_DIR))
            if is_version_id(name)
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

    def latest(self) -> tuple["Version", Manifest]:
        """The LATEST published version and its manifest (read once), checked against its publish record."""
        latest = self.read_latest()
        if latest is None:
            raise NotCommitted(f"{self.root}: no {LATEST_NAME}; publish a version first")
        return self.published(latest)

    def published(self, version_id: str) -> tuple["Version", Manifest]:
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
    def at(cls, uri: str) -> "Version":
        """The version at a directory URI, normalised (`normalize_uri`); recognises ROOT/versions/ID.
        A directory right under a `versions/` is a version: its name must be an id by the rule
        (InvalidVersionId), never a plain directory named `.hidden`, `２０２６` or `..`."""
        uri = normalize_place(uri)
        anchor, parts = _anchor_parts(uri)
        if len(parts) >= 2 and parts[-2] == VERSIONS_DIR and (len(parts) > 2 or "://" in anchor):
            return Dataset(uri.rsplit("/", 2)[0]).version(parts[-1])
        return cls(uri)

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

    def entry_uri(self, entry: "ShardEntry") -> str:
        """Where a manifest entry's bytes are: here, or in the version a reference names (resolved
        through the dataset, never by joining `..`, which object stores do not resolve)."""
        if entry.version is None:
            return self.path(entry.name)
        if self.dataset is None:
            raise NotCommitted(f"{self.uri}: references shards of version {entry.version!r}, but is not inside a dataset root")
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
        return self.dataset is not None and self.id is not None and self.storage.exists(
            self.dataset.record_uri(self.id)
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
        if self.dataset is not None:
            check_dataset_root(self.dataset.root)
            _check_not_a_root(self.uri)  # X/versions/inner, where inner is a dataset root
        else:  # a plain directory: it may be a version itself, but nothing above it may be one, nor a root
            _check_enclosing(self.uri, "directory", (), True, itself=False, target=True)
        published = self.is_published()
        if published or self.is_sealed():
            state = "published" if published else "sealed for publishing"
            raise VersionSealed(
                f"version {self.name!r} at {self.uri} is {state}: published versions are immutable; "
                "write a new version instead"
            )
