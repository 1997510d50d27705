"""What a location, a version id and a shard's location may be, and where a dataset root may lie.

Checked before any storage call, by every entry point (Dataset, Version.at, the writer, the jobs,
the CLI, the config loader): a path that breaks the URI rule, an id with a look-alike letter or a
root inside another dataset never reaches storage, and nothing is created for it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from ..errors import InputError, InvalidVersionId, NestedDatasetRoot
from ..format.names import control_error
from ..storage import Storage, storage_for
from .tree import LATEST_NAME, MANIFEST_NAME, PUBLISHED_DIR, VERSIONS_DIR, WRITER_MARK_NAME

VERSION_ID_RULE = "[A-Za-z0-9][A-Za-z0-9._-]{0,127}, and no '..'"
# Explicit ASCII ranges, and re.ASCII besides: no full-width digit, Cyrillic letter or other look-alike.
_VERSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", re.ASCII)
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


def version_place(uri: str) -> tuple[str, str] | None:
    """(root, id) when a normalized `uri` is ROOT/versions/ID (the id not checked), else None."""
    anchor, parts = _anchor_parts(uri)
    if len(parts) >= 2 and parts[-2] == VERSIONS_DIR and (len(parts) > 2 or "://" in anchor):
        return uri.rsplit("/", 2)[0], parts[-1]
    return None


def is_version_id(name: object) -> bool:
    """`name` is a version id by the rule (ASCII only; never '..')."""
    return isinstance(name, str) and _VERSION_ID.fullmatch(name) is not None and ".." not in name


def check_version_id(version: object) -> str:
    """Return `version` if it is a valid version id, else raise naming it and the rule."""
    if not is_version_id(version):
        shown = _shown(version) if isinstance(version, str) else repr(version)
        raise InvalidVersionId(f"version id {shown} breaks the rule {VERSION_ID_RULE} (ASCII only)")
    return version  # type: ignore[return-value]


ROOT_RULE = "a dataset root may not lie inside another dataset's root or a version directory, nor hold another's root"
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
    threads = min(len(probes), storage.concurrent_requests)
    if threads <= 1:
        return [_holds(storage, directory, name) for directory, name in probes]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="root-check") as pool:
        return list(pool.map(lambda probe: _holds(storage, *probe), probes))


def _shown_mark(name: str) -> str:
    return f"{name}/" if name in _DIRECTORY_MARKS else name


def _check_enclosing(uri: str, what: str, known: Iterable[str], look: bool, itself: bool, target: bool = False) -> str:
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
        place = version_place(directory)
        if place is not None and is_version_id(place[1]):  # else a directory no id names: still a version's place
            how = f"lies inside version {place[1]!r} of dataset {place[0]} (it holds {mark})"
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
            how = (
                f"is itself a dataset root (it holds {_shown_mark(name)}); write a version of it, ROOT/versions/VERSION"
            )
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


_SHARD_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,250}\.tar", re.ASCII)


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


def check_write_target(uri: str, root: str | None) -> None:
    """Where a write may land: ROOT/versions/ID (`root` given) of a root inside no other dataset
    or version, that is no dataset root itself; or a plain directory (`root` None) that may be a
    version itself, but with no version or root above it."""
    if root is not None:
        check_dataset_root(root)
        _check_not_a_root(uri)  # X/versions/inner, where inner is a dataset root
    else:
        _check_not_below_a_version_by_path(uri)
        _check_enclosing(uri, "directory", (), True, itself=False, target=True)


def _check_not_below_a_version_by_path(uri: str) -> None:
    """X/versions/ID/more, before X exists: the write's own first file would make X a dataset
    root holding version ID, and the commit would refuse it then, after staging. Refused by its
    path, before anything is created."""
    here = _location(uri)
    anchor, parts = _split_location(here)
    for at, part in enumerate(parts[:-2]):
        if part == VERSIONS_DIR:
            root = anchor.rstrip("/") + "/" + "/".join(parts[:at]) if at else anchor
            how = f"lies inside version {parts[at + 1]!r} of dataset {root} (by its path: its first file makes {root} a dataset root)"
            raise _refused("directory", uri, root, how)
