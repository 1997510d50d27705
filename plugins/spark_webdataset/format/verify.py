"""Check one shard against the WebDataset rules and its manifest entry, streaming it once.

Pure format logic over a binary stream: the validator runs it in a local
process pool or in Spark tasks, and reads shards from any storage.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

from ..errors import TarFormatError
from .checksums import Digests
from .fast_verify import scan_shard
from .names import control_error, key_error
from .sample_reader import iter_samples
from .tar_rules import remaining

MAX_ERRORS_PER_SHARD = 20


class _HashingRaw(io.RawIOBase):
    """Hashes (crc32c, sha256) and counts every byte read from `stream`, in the large chunks a buffer reads."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.digest = Digests()
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        data = self.stream.read(len(view))
        count = len(data)
        view[:count] = data
        self.digest.update(data)
        self.size += count
        return count


class HashingReader(io.BufferedReader):
    """A buffered stream whose every byte, read or drained, goes into a crc32c and a sha256."""

    def __init__(self, stream: BinaryIO) -> None:
        self.hashed = _HashingRaw(stream)
        super().__init__(self.hashed, buffer_size=1 << 20)

    def seekable(self) -> bool:
        return False

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


@dataclass
class ShardReport:
    name: str
    samples: int = 0
    bytes: int = 0
    crc32c: str = ""
    sha256: str = ""
    errors: list[dict] = field(default_factory=list)
    error_count: int = 0  # every error found; `errors` lists the first MAX_ERRORS_PER_SHARD
    keys: list[str] = field(default_factory=list)  # in shard order; sorted by the caller
    offsets: list[int] = field(default_factory=list)  # of each sample, in shard order
    lengths: list[int] = field(default_factory=list)  # of each sample's bytes

    @property
    def ok(self) -> bool:
        return not self.error_count

    def error(self, message: str, offset: int | None = None, key: str | None = None) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_ERRORS_PER_SHARD:
            self.errors.append({"shard": self.name, "offset": offset, "key": key, "error": message})

    def summary(self) -> dict:
        return {
            "name": self.name,
            "ok": self.ok,
            "samples": self.samples,
            "bytes": self.bytes,
            "crc32c": self.crc32c,
            "sha256": self.sha256,
            "errors": self.error_count,
        }


def verify_shard(
    name: str,
    stream: BinaryIO,
    expected: dict | None,
    required_fields: Iterable[str] = (),
    shard_bytes: int | None = None,
    max_member: int | str | None = None,
) -> ShardReport:
    """Stream `stream` once; report every rule it breaks (up to a bound) with offsets and keys.

    `expected` is the shard's manifest entry (samples, bytes, crc32c and/or
    sha256, first_key, last_key), or None for a shard the manifest does not
    list. Both checksums are computed; those the entry carries are compared.
    The sizes in headers are held to the shard's end (the stream's, if it
    can seek, else `shard_bytes`, as storage lists it) and to `max_member`.
    """
    report = ShardReport(name)
    required = set(required_fields)
    left = remaining(stream)
    shard_bytes = shard_bytes if left is None else left
    reader = HashingReader(stream)
    try:
        for sample in iter_samples(reader, shard_bytes=shard_bytes, max_member=max_member):
            report.samples += 1
            report.keys.append(sample.key)
            report.offsets.append(sample.offset)
            report.lengths.append(sample.end - sample.offset)
            problem = key_error(sample.key)
            if problem:
                report.error(f"invalid key: {problem}", sample.offset, sample.key)
            for name in sample.fields:
                control = control_error(name)
                if control:
                    report.error(f"invalid field name {name!r}: it holds {control}", sample.offset, sample.key)
            missing = required - sample.fields.keys()
            if missing:
                report.error(f"required field(s) {sorted(missing)} missing", sample.offset, sample.key)
        reader.drain()
    except TarFormatError as error:
        report.error(error.message, error.offset, error.key)
        reader.drain()
    report.bytes = reader.hashed.size
    report.crc32c = reader.hashed.digest.crc32c
    report.sha256 = reader.hashed.digest.sha256
    _compare_with_manifest(report, expected)
    return report


def check_shard(
    name: str,
    open_stream: Callable[[], BinaryIO],
    expected: dict | None,
    required_fields: Iterable[str] = (),
    shard_bytes: int | None = None,
    max_member: int | str | None = None,
) -> ShardReport:
    """`verify_shard`'s answer at the speed of reading: the fast scan first, the exact parser
    (a second read) only for a shard the scan cannot vouch for."""
    required = sorted(set(required_fields))
    with open_stream() as stream:
        scan = scan_shard(stream, required, max_member)
    if scan is None:
        with open_stream() as stream:
            return verify_shard(name, stream, expected, required, shard_bytes, max_member)
    report = ShardReport(
        name,
        samples=len(scan.keys),
        bytes=scan.bytes,
        crc32c=scan.crc32c,
        sha256=scan.sha256,
        keys=scan.keys,
        offsets=scan.offsets.tolist(),
        lengths=scan.lengths.tolist(),
    )
    _compare_with_manifest(report, expected)
    return report


def _compare_with_manifest(report: ShardReport, expected: dict | None) -> None:
    if expected is None:
        report.error("shard is present but not listed in the manifest")
        return
    # crc32c is what the writer records; sha256 is in manifests of checksum=sha256 and of older writers
    for what in ("bytes", "crc32c", "sha256"):
        if expected.get(what) is not None and getattr(report, what) != expected[what]:
            report.error(f"{what} {getattr(report, what)} differs from the manifest's {expected[what]}")
    if report.ok and report.samples != expected["samples"]:
        report.error(f"{report.samples} samples, the manifest says {expected['samples']}")
    if report.ok and report.keys and (report.keys[0], report.keys[-1]) != (expected["first_key"], expected["last_key"]):
        report.error(
            f"key range {report.keys[0]!r}..{report.keys[-1]!r} differs from the manifest's "
            f"{expected['first_key']!r}..{expected['last_key']!r}"
        )
