"""Validate a written version: every shard opened and streamed once, in parallel.

Checks everything docs/versions.md "Validate" lists (tar damage, unsafe or misshapen
names, grouping, repeated fields, required fields, keys across shards,
counts/bytes/crc32c against the manifest (and sha256 where an older or
checksum=sha256 manifest has it), missing and unlisted shards) and writes
`_validation.json` next to the manifest, with each shard's crc32c,
sha256 (publish puts the sha256 in the index) and the storage identity
of the bytes it checked. A sealed or published version gets no report
under it (the one publish relied on is part of the version): the verdict
is returned, and written only where the caller says. Shards are checked in
a local process pool, or by a Spark job (one task per shard, jobs/validate_spark.py)
for versions of thousands of shards. Keys are proven unique across the version by
merging sorted per-shard runs (pool) or by Spark's group-by (Spark); the same
sorted stream of (key, shard, offset, length) proves the sample index exact:
every sample in it once, where the tars have it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from .. import fault_points
from ..errors import BadOption, ChecksumMismatch, InputError, VersionSealed, WebDatasetError
from ..format.checksums import crc32c_extend, crc32c_text
from ..format.keys import count_duplicates, merge_blocks
from ..format.manifest import Manifest, ShardEntry
from ..format.sample_index import index_block_rows
from ..format.verify import ShardReport, check_shard
from ..storage import Storage, storage_for
from ..storage.base import StoredObject
from .index_layers import index_parts, locations, merged_live_rows
from .index_proof import (
    IndexFiles,
    IndexRows,
    check_index,
    check_index_counts,
    identity_json,
    index_files,
    report_entries,
)
from .layout import Version
from .lock import CommitLock
from .tree import MANIFEST_NAME, METADATA_FILES

VALIDATION_KIND = "spark-webdataset-validation-v1"
MAX_REPORTED_ERRORS = 100
Duplicates = tuple[int, list[tuple[str, list[str]]]]  # keys seen twice, and the first of them with their shards
# (version uri, [(shard, size, expected manifest entry)], required fields, index) ->
# (per-shard results, duplicates, what the index gets wrong)
ShardCheck = Callable[[str, list, Sequence[str], IndexRows], tuple[list[dict], Duplicates, list[str]]]
RUN_SCHEMA = pa.schema([("key", pa.large_string()), ("offset", pa.int64()), ("length", pa.int64())])
RUN_BLOCK_KEYS = 1 << 16
READ_CHUNK_BYTES = 8 << 20  # a referenced shard whose identity moved is read this much at a time
REFERENCE_READ_THREADS = 4  # such shards read at once (I/O: the crc32c releases the GIL)


@dataclass
class ValidationReport:
    version_uri: str
    manifest_sha256: str
    shards: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    error_count: int = 0
    seconds: float = 0.0
    written_to: str | None = None  # where the report went (None: nowhere)
    sealed: bool = False  # the version is sealed or published: nothing was written under it
    index_files: IndexFiles = field(default_factory=dict)  # the index files it read, as listed before
    index_check: str | None = None  # how a child's index across its layers was proven (index_proof.py)

    @property
    def errors_truncated(self) -> bool:
        """`errors` lists the first MAX_REPORTED_ERRORS of `error_count`."""
        return self.error_count > len(self.errors)

    @property
    def ok(self) -> bool:
        return self.error_count == 0

    @property
    def samples(self) -> int:
        return sum(s["samples"] for s in self.shards)

    @property
    def bytes(self) -> int:
        return sum(s["bytes"] for s in self.shards)

    def add_error(
        self, message: str, shard: str | None = None, offset: int | None = None, key: str | None = None
    ) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append({"shard": shard, "offset": offset, "key": key, "error": message})

    def to_json(self) -> bytes:
        document = {
            "__kind__": VALIDATION_KIND,
            "ok": self.ok,
            "version": self.version_uri,
            "manifest_sha256": self.manifest_sha256,
            "samples": self.samples,
            "bytes": self.bytes,
            "shard_count": len(self.shards),
            "error_count": self.error_count,  # every error found
            "errors_truncated": self.errors_truncated,  # `errors` lists only the first MAX_REPORTED_ERRORS
            "errors": self.errors,
            "shards": self.shards,
            "sample_index_files": report_entries(self.index_files),  # the identities the next child trusts
            "sample_index_check": self.index_check,  # how a child's index was proven (None: no layers to prove)
            "run": {
                "checked_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "seconds": round(self.seconds, 3),
            },
        }
        return (json.dumps(document, indent=1, ensure_ascii=False) + "\n").encode()

    def summary(self) -> str:
        state = "OK" if self.ok else f"FAILED with {self.error_count} error(s)"
        lines = [
            f"validate {self.version_uri}: {state}: {len(self.shards)} shards, {self.samples} samples, "
            f"{self.bytes} bytes in {self.seconds:.1f} s"
        ]
        for error in self.errors[:10]:
            where = ", ".join(
                f"{k} {error[k]!r}" if k == "key" else f"{k} {error[k]}"
                for k in ("shard", "offset", "key")
                if error.get(k) is not None
            )
            lines.append(f"  - {where}: {error['error']}")
        if self.error_count > min(len(self.errors), 10):
            lines.append(f"  ({self.error_count - min(len(self.errors), 10)} more error(s) not shown)")
        if self.index_check is not None:
            lines.append(f"sample index proven {self.index_check}")
        if self.written_to is not None:
            lines.append(f"report written to {self.written_to}")
        elif self.sealed:
            lines.append("the version is sealed: nothing written under it (--report PATH writes the report elsewhere)")
        return "\n".join(lines)


def check_shard_task(task: tuple[str, str, dict | None, list[str], str | None, int | None]) -> dict:
    """One shard, in a worker process; its sorted keys go to `keys_path` as an Arrow stream.

    Whatever the shard holds, the answer is a result: a shard that cannot
    be read or checked at all is one with that error (its shard named), so
    the report is written and says `ok: false` (a broken tar is already an
    error with its offset, from `check_shard`)."""
    uri, name, expected, required, keys_path, listed_bytes = task
    storage = storage_for(uri)
    path = Version.at(uri).location_uri(name) if name.startswith("../") else storage.join(uri, name)  # --full
    try:
        report = check_shard(name, lambda: storage.open_read(path), expected, required, listed_bytes)
    except Exception as error:  # noqa: BLE001 - one shard's failure is an error of the report, not a crash
        report = ShardReport(name)
        report.error(f"the shard could not be checked: {type(error).__name__}: {error}", getattr(error, "offset", None))
    result = report.summary()
    result["error_list"] = report.errors
    rows = pa.record_batch(
        [
            pa.array(report.keys, pa.large_string()),
            pa.array(report.offsets, pa.int64()),
            pa.array(report.lengths, pa.int64()),
        ],
        schema=RUN_SCHEMA,
    )
    rows = rows.take(pc.sort_indices(rows.column(0)))
    if keys_path is not None:
        with pa.OSFile(keys_path, "wb") as sink, pa.ipc.new_stream(sink, RUN_SCHEMA) as writer:
            for start in range(0, len(rows), RUN_BLOCK_KEYS):
                writer.write_batch(rows.slice(start, RUN_BLOCK_KEYS))
    else:
        result["keys"] = report.keys
        result["offsets"] = report.offsets
        result["lengths"] = report.lengths
    return result


def _read_run(path: str) -> Iterator[pa.RecordBatch]:
    with pa.memory_map(path) as source:
        yield from pa.ipc.open_stream(source)


def _scanned_rows(blocks: Iterable[tuple[pa.RecordBatch, np.ndarray]], names: list[str]) -> Iterator[pa.RecordBatch]:
    """Merged per-shard runs (key, offset, length) with the run number of each row, as (key, shard, offset, length)."""
    shard_names = pa.array(names, pa.string())
    for rows, runs_of in blocks:
        yield pa.record_batch(
            [rows.column(0), shard_names.take(pa.array(runs_of)), rows.column(1), rows.column(2)],
            names=["key", "shard", "offset", "length"],
        )


def _tasks(uri: str, manifest: Manifest, present: dict[str, int], report: ValidationReport, full: bool = False):
    """(name, size, what the manifest says) of every shard to open: the version's own and any
    other tar in its directory; with `full`, the referenced ones too (by location)."""
    listed = {shard.name: shard for shard in manifest.own_shards}
    sizes = {**present, **_referenced_sizes(Version.at(uri), manifest)} if full else present
    for shard in manifest.shards if full else manifest.own_shards:
        if shard.location not in sizes:
            report.add_error("shard is listed in the manifest but missing", shard.location)
            continue
        yield (
            shard.location,
            sizes[shard.location],
            {
                "samples": shard.samples,
                "bytes": shard.bytes,
                "crc32c": shard.crc32c,
                "sha256": shard.sha256,
                "first_key": shard.first_key,
                "last_key": shard.last_key,
            },
        )
    for name in sorted(present):
        if name not in listed and name.endswith(".tar"):
            yield name, present[name], None


def _referenced_sizes(version: Version, manifest: Manifest) -> dict[str, int]:
    """The stored size of every referenced shard, by location (one listing a version that stores some)."""
    sizes: dict[str, int] = {}
    for stored_in in sorted({shard.version for shard in manifest.shards if shard.version is not None}):
        holder = version.dataset.version(stored_in) if version.dataset else None
        listed = holder.storage.list_sizes(holder.uri) if holder else {}
        sizes.update({f"../{stored_in}/{name}": size for name, size in listed.items()})
    return sizes


def required_fields(manifest: Manifest, extra: Sequence[str] = ()) -> list[str]:
    """Fields every sample must have: non-nullable columns, plus any the caller names."""
    fields = [f["name"] for f in manifest.fields if f.get("nullable") is False]
    return sorted(set(fields) | set(extra))


def validate_version(
    uri: str,
    workers: int | None = None,
    require: Sequence[str] = (),
    check: ShardCheck | None = None,
    write_report: bool = True,
    progress: bool = False,
    full: bool = False,
    report_path: str | None = None,
) -> ValidationReport:
    """Validate the version directory `uri`; write `_validation.json` unless told not to, or unless
    the version is sealed or published (a sealed version's report is the one publish relied on:
    it never changes); write the report to `report_path` too if given.
    `check` checks the shards elsewhere (jobs.validate_spark: a Spark job); default: a local pool.
    A shard referenced from a parent is proven unchanged without reading it when its storage
    identity is the one its own version's validation recorded, else read and its crc32c checked;
    with `full`, or with fields to `require` (a report proves no field it was not asked for), every
    shard is opened, wherever it is stored."""
    started = time.monotonic()
    if report_path is not None:
        report_path = _check_report_path(report_path)
    version = Version.at(uri)
    uri = version.uri
    storage = version.storage
    manifest_bytes, _ = version.read_manifest_bytes()
    if manifest_bytes is None and not storage.list_sizes(uri) and not storage.list_dirs(uri):
        raise InputError(f"{uri}: no version there (nothing at this path): give ROOT/versions/ID of a written version")
    if manifest_bytes is None:
        report = ValidationReport(uri, "")
        report.add_error(f"no {MANIFEST_NAME}: the version was never committed")
        report.seconds = time.monotonic() - started
        return report
    manifest = Manifest.from_json(manifest_bytes)
    report = ValidationReport(uri, hashlib.sha256(manifest_bytes).hexdigest())
    _check_totals(json.loads(manifest_bytes), manifest, report)
    # Taken before any byte is read: a shard rewritten while (or after) it is checked gets another
    # identity than the one recorded, so whoever trusts this report reads it again.
    identities = storage.identities(uri)
    report.index_files = index_files(version, manifest)
    present = {n: s for n, s in storage.list_sizes(uri).items() if n not in METADATA_FILES and not n.startswith(".")}
    for name in sorted(present):
        if not name.endswith(".tar"):
            report.add_error("unexpected file in the version directory", name)
    required = required_fields(manifest, require)
    # A storing version's report proves its shards' bytes and rules, not fields asked for only now:
    # with --require, referenced shards are opened too.
    full = full or (bool(require) and any(shard.version is not None for shard in manifest.shards))
    tasks = list(_tasks(uri, manifest, present, report, full))
    index = _index_rows(version, manifest, full)
    if check is not None:
        results, duplicates, index_errors = check(uri, tasks, required, index)
    else:
        results, duplicates, index_errors = _check_with_pool(uri, tasks, required, workers, progress, index)
    fault_points.point("validate:shards-checked")
    for result in results:
        shard_errors = result.pop("error_list")
        for error in shard_errors:
            report.add_error(error["error"], error["shard"], error["offset"], error["key"])
        report.error_count += max(0, result["errors"] - len(shard_errors))  # found, but past the shard's list
        result["identity"] = identity_json(identities.get(result["name"]))  # a child trusts these bytes by it
        report.shards.append(result)
    duplicate_count, listed = duplicates
    for key, shards in listed:
        report.add_error(f"key appears in shards {', '.join(shards)}", shards[-1], None, key)
    if duplicate_count > len(listed):
        report.add_error(f"{duplicate_count} keys appear in more than one shard ({len(listed)} listed above)")
        report.error_count += duplicate_count - len(listed) - 1
    for error in index_errors:
        report.add_error(error)
    if not full:
        report.shards.extend(_check_references(version, manifest, report))
    if (manifest.parent is not None or manifest.sample_index_layers) and manifest.sample_index:
        problems, report.index_check = check_index_counts(version, manifest, report.index_files, full)
        for error in problems:
            report.add_error(error)
    report.seconds = time.monotonic() - started
    if report_path is not None:
        try:
            storage_for(report_path).write_atomic(report_path, report.to_json())
        except (OSError, ValueError) as error:  # a directory, a name too long, a NUL: the option's fault
            raise BadOption(f"--report {report_path}: cannot write the report there: {error}") from None
        report.written_to = report_path
    if write_report:
        _write_unless_sealed(version, report)
    return report


def _check_report_path(report_path: str) -> str:
    """The report path, absolute; VersionSealed if it is inside a sealed or published version
    (writing it would change that version)."""
    path = report_path[len("file://") :] if report_path.startswith("file://") else report_path
    if "://" not in path:
        path = os.path.abspath(path)
        if os.path.isdir(path):
            raise BadOption(f"--report {report_path}: is a directory; name the report file")
    directory = path.rsplit("/", 1)[0]
    while "/" in directory.split("://", 1)[-1]:
        try:
            holder = Version.at(directory)
        except InputError as error:  # the path rule (layout.normalize_uri): name the option it came from
            raise BadOption(f"--report {report_path}: {error}") from None
        if holder.dataset is not None and (holder.is_sealed() or holder.is_published()):
            raise VersionSealed(
                f"--report {report_path}: inside version {holder.name!r} at {holder.uri}, which is sealed or "
                "published: nothing may be written under it; write the report elsewhere"
            )
        directory = directory.rsplit("/", 1)[0]
    return path


def _write_unless_sealed(version: Version, report: ValidationReport) -> None:
    """`_validation.json` under the version, unless it is sealed or published. Under the commit
    lock, which publish holds from reading the report until the seal is on: a validation racing a
    publish either lands before publish reads the report or sees the seal and writes nothing."""
    if version.is_sealed() or version.is_published():
        report.sealed = True
        return
    with CommitLock(version, f"validate-{uuid.uuid4().hex}"):
        if version.is_sealed() or version.is_published():
            report.sealed = True
            return
        version.storage.write_atomic(version.validation_uri, report.to_json())
    if report.written_to is None:
        report.written_to = version.validation_uri


def _check_totals(document: dict, manifest: Manifest, report: ValidationReport) -> None:
    """The manifest's own totals must agree with its shard list."""
    actual = {"samples": manifest.samples, "bytes": manifest.bytes, "shard_count": len(manifest.shards)}
    for name, value in actual.items():
        if document.get(name) != value:
            report.add_error(f"the manifest's {name} is {document.get(name)!r} but its shard list adds up to {value}")


def _check_references(version: Version, manifest: Manifest, report: ValidationReport) -> list[dict]:
    """Shards referenced from a parent, proven unchanged against the sealed validation report of
    the version that stores each: that report must say ok, for this shard too, with the crc32c
    the manifest says; the listing must show the size it says (and on gs:// the server's crc32c).
    A storage identity is a cache of "already verified", not the proof: a shard whose identity is
    the one that report recorded is not read; one whose identity moved (a copied root, a rewrite,
    a report from before reports recorded identities) is read and its crc32c checked, so equal
    bytes pass and different bytes fail (ChecksumMismatch). An error names the shard and the
    version that stores it. One listing and one report read a version that stores some,
    `concurrent_requests` versions at a time (a long chain of versions is many round trips on an
    object store)."""
    by_version: dict[str, list] = {}
    for shard in manifest.shards:
        if shard.version is not None:
            by_version.setdefault(shard.version, []).append(shard)
    if by_version and version.dataset is None:
        report.add_error(f"references shards of versions {sorted(by_version)} but is not inside a dataset root")
        return []
    dataset = version.dataset

    def evidence(stored_in: str) -> tuple[dict[str, StoredObject], dict]:
        holder = dataset.version(stored_in)
        return holder.storage.objects(holder.uri), holder.read_validation() or {}

    threads = max(1, min(version.storage.concurrent_requests, len(by_version)))
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="webdataset-references") as pool:
        found_by_version = dict(zip(sorted(by_version), pool.map(evidence, sorted(by_version))))
    checks: list[tuple[str, ShardEntry, StoredObject | None, dict, list[str], bool]] = []
    for stored_in, shards in sorted(by_version.items()):
        stored, validation = found_by_version[stored_in]
        checked = {row.get("name"): row for row in validation.get("shards", [])}
        for shard in shards:
            where = f"shard {shard.name} of version {stored_in}"
            found = checked.get(shard.name) or {}
            listed = stored.get(shard.name)
            problems = []
            if validation.get("ok") is not True:
                problems.append(
                    f"referenced {where}: version {stored_in}'s validation report "
                    f"says ok: {validation.get('ok')} (a version that failed validation proves nothing)"
                )
            if listed is None or listed.size != shard.bytes:
                size = None if listed is None else listed.size
                problems.append(f"referenced {where} is {size} bytes on storage, the manifest says {shard.bytes}")
            if found.get("crc32c") != shard.crc32c or found.get("ok") is not True:
                problems.append(
                    f"referenced {where}: its version's validation has crc32c {found.get('crc32c')} (ok: "
                    f"{found.get('ok')}), the manifest says {shard.crc32c}"
                )
            if listed is not None and listed.crc32c is not None and listed.crc32c != shard.crc32c:
                problems.append(
                    f"referenced {where} has crc32c {listed.crc32c} on the server, the manifest says {shard.crc32c}"
                )
            # the cache: these bytes were verified by that validation only if the identity is the same
            trusted = (
                listed is not None
                and found.get("identity") is not None
                and identity_json(listed.identity) == found["identity"]
            )
            checks.append((stored_in, shard, listed, found, problems, not trusted and listed is not None))
    readers = max(1, min(REFERENCE_READ_THREADS, sum(1 for check in checks if check[-1])))
    with ThreadPoolExecutor(max_workers=readers, thread_name_prefix="webdataset-reference-reads") as pool:
        reads = [pool.submit(_read_back, version, stored_in, shard) if read else None
                 for stored_in, shard, _, _, _, read in checks]  # fmt: skip
    results = []
    for (_stored_in, shard, listed, found, problems, read), future in zip(checks, reads):
        if future is not None:
            problems.extend(future.result())
        for problem in problems:
            report.add_error(f"{problem}: it changed after it was published", shard.location)
        results.append({
            "name": shard.location, "ok": not problems, "samples": shard.samples, "bytes": shard.bytes,
            "crc32c": shard.crc32c, "sha256": found.get("sha256"), "errors": len(problems), "referenced": True,
            "identity": None if listed is None else identity_json(listed.identity),  # what this validation verified
            "verified_by": "read" if read else "identity" if listed is not None else None,  # None: not found
        })  # fmt: skip
    return results


def _read_back(version: Version, stored_in: str, shard: ShardEntry) -> list[str]:
    """Read a referenced shard whose storage identity moved; what is wrong with its bytes (none: equal)."""
    where = f"shard {shard.name} of version {stored_in}"
    path = version.entry_uri(shard)
    try:
        crc, size = _stored_crc32c(version.storage, path)
    except WebDatasetError as error:
        return [f"referenced {where} could not be read: {type(error).__name__}: {error}"]
    if (crc, size) == (shard.crc32c, shard.bytes):
        return []
    mismatch = ChecksumMismatch(
        f"referenced {where} ({path}) has crc32c {crc} ({size} bytes), read now because its storage identity "
        f"is not the one version {stored_in}'s validation recorded; the manifest says {shard.crc32c} ({shard.bytes} bytes)"
    )
    return [f"{type(mismatch).__name__}: {mismatch}"]


def _stored_crc32c(storage: Storage, path: str) -> tuple[str, int]:
    """crc32c (as GCS spells it) and size of the object's bytes, read once."""
    crc, size = 0, 0
    with storage.open_read(path) as stream:
        while chunk := stream.read(READ_CHUNK_BYTES):
            crc = crc32c_extend(crc, chunk)
            size += len(chunk)
    return crc32c_text(crc), size


def _own_rows(rows: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Index rows of the shards this version stores (the ones its tars are compared with)."""
    for batch in rows:
        yield batch.filter(pc.invert(pc.starts_with(batch.column("shard"), "../")))


def _index_rows(version: Version, manifest: Manifest, full: bool = False) -> IndexRows:
    """The index's rows of the shards opened (all with `full`), to be compared with the tars' (None
    if the manifest names none: a version written before spark-webdataset kept one is still valid,
    only not readable by key)."""
    if not manifest.sample_index:
        return None
    path = version.path(manifest.sample_index)
    storage = version.storage
    # Every block read here is checked against its key filter: a child's proof skips the blocks of
    # this version's file whose filter says no, trusting this report's identity of the file.
    if full and manifest.sample_index_layers:  # every shard opened: every live row, over the layers
        return lambda: merged_live_rows(index_parts(version, manifest), locations(manifest), check_filters=True)

    def rows() -> Iterator[pa.RecordBatch]:
        with storage.open_read(path) as stream:
            every = index_block_rows(stream, check_filters=True)
            yield from every if full else _own_rows(every)

    return rows


def _check_with_pool(uri, tasks, required, workers, progress, index: IndexRows = None):
    names = [name for name, _, _ in tasks]
    with tempfile.TemporaryDirectory(prefix="wds-validate-") as scratch:
        runs = [os.path.join(scratch, f"{index:06d}.keys") for index in range(len(tasks))]
        jobs = [(uri, name, expected, required, run, size) for (name, size, expected), run in zip(tasks, runs)]
        workers = workers or os.cpu_count() or 1
        bar = tqdm(total=len(jobs), unit="shard", desc="validate", disable=not progress)
        if workers == 1 or len(jobs) <= 1:
            results = [check_shard_task(job) for job in jobs]
            bar.update(len(jobs))
        else:
            with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
                results = []
                for result in pool.map(check_shard_task, jobs):
                    results.append(result)
                    bar.update(1)
        bar.close()
        count, found = count_duplicates(merge_blocks(_read_run(run) for run in runs), MAX_REPORTED_ERRORS)
        index_errors = check_index(
            index, lambda: _scanned_rows(merge_blocks(_read_run(run) for run in runs), names), count, results
        )
    return results, (count, [(key, [names[first], names[second]]) for key, first, second in found]), index_errors
