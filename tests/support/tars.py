"""Tars written by hand, header by header (hostile, damaged or rule-breaking ones), and what every
parser of ours says about them: the exact parser, the reader's fast path (seekable and pipe), the validator.

Also shards as other tools write them (Python's tarfile) and what they hold, read back with tarfile.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from spark_webdataset.errors import TarFormatError
from spark_webdataset.format import ustar
from spark_webdataset.format.fast_read import read_sample_batches
from spark_webdataset.format.fast_verify import scan_shard
from spark_webdataset.format.manifest import Manifest, ShardEntry
from spark_webdataset.format.sample_reader import iter_samples
from spark_webdataset.format.verify import check_shard

END = ustar.END_OF_ARCHIVE
BLOCK = ustar.BLOCK
HUGE = 2**62


def member(name: str | bytes, data: bytes, typeflag: bytes = b"0") -> bytes:
    """One USTAR member (header, payload, padding) as our writer lays it out (a bytes name goes in as is)."""
    raw = name.encode() if isinstance(name, str) else name
    header = ustar.build_header(ustar.header_template(0, typeflag), raw, len(data))
    return header + data + bytes(ustar.padding(len(data)))


def with_field(header: bytes, start: int, raw: bytes) -> bytes:
    """`header` (a header block, or a whole member) with bytes at `start` replaced and its checksum made
    right again (as tarfile spells it); what follows the header block is kept."""
    block = bytearray(header[:BLOCK])
    block[start : start + len(raw)] = raw
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block) + header[BLOCK:]


def claiming(name: str, data: bytes, size_field: bytes) -> bytes:
    """A member whose header's size field says `size_field` (12 bytes) whatever `data` holds."""
    assert len(size_field) == 12
    return with_field(member(name, data), 124, size_field)


def base256(size: int) -> bytes:
    return b"\x80" + size.to_bytes(11, "big")


def pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length = len(str(length)) + len(body)
    return str(length).encode() + body


def pax(records: bytes) -> bytes:
    return member("././@PaxHeader", records, typeflag=b"x")


class Pipe(io.RawIOBase):
    """The bytes of a shard as a stream that cannot seek (a pipe, a socket)."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:  # type: ignore[override]
        count = min(len(target), len(self.data))
        target[:count] = self.data[:count]
        self.data = self.data[count:]
        return count


def failure(call) -> tuple[str, str, int]:
    """(type, message, offset) of the TarFormatError `call` raises."""
    with pytest.raises(TarFormatError) as error:
        call()
    return type(error.value).__name__, error.value.message, error.value.offset


def verdicts(data: bytes, max_member: int | None = None) -> dict[str, tuple]:
    """What every parser of ours says about `data` (each must fail)."""
    fields = ["txt"]
    said = {
        "exact": failure(lambda: list(iter_samples(io.BytesIO(data), max_member=max_member))),
        "exact, fields only": failure(lambda: list(iter_samples(io.BytesIO(data), {"txt"}, max_member=max_member))),
        "exact, pipe": failure(
            lambda: list(iter_samples(io.BufferedReader(Pipe(data)), shard_bytes=len(data), max_member=max_member))
        ),
    }
    for chunk in (BLOCK * 4, 1 << 20):
        said[f"fast {chunk}"] = failure(
            lambda: list(read_sample_batches(io.BytesIO(data), fields, chunk, max_member=max_member))
        )
        said[f"fast {chunk}, pipe"] = failure(
            lambda: list(
                read_sample_batches(
                    io.BufferedReader(Pipe(data)), fields, chunk, shard_bytes=len(data), max_member=max_member
                )
            )
        )
    said["fast, keys only"] = failure(lambda: list(read_sample_batches(io.BytesIO(data), [], max_member=max_member)))
    assert scan_shard(io.BytesIO(data), max_member=max_member) is None
    report = check_shard("shard-000000.tar", lambda: io.BytesIO(data), None, (), len(data), max_member)
    first = report.errors[0]
    assert first["shard"] == "shard-000000.tar"
    said["validator"] = (None, first["error"], first["offset"])
    return said


def one_verdict(data: bytes, max_member: int | None = None) -> tuple[str, str, int]:
    said = verdicts(data, max_member)
    validator = said.pop("validator")
    distinct = set(said.values())
    assert len(distinct) == 1, said
    [(kind, message, offset)] = distinct
    assert validator == (None, message, offset)
    return kind, message, offset


GOOD = member("a.txt", b"first")  # a sample before the bad header: the error is not at offset 0


def huge_base256() -> bytes:
    """A USTAR size field in base-256 claiming 2**62 bytes (the adversarial test's shard)."""
    return GOOD + claiming("b.txt", b"2", base256(HUGE)) + END


def bogus_pax_length() -> bytes:
    """A PAX record whose length (99999999999) runs far past its extended header."""
    return GOOD + pax(b"99999999999 path=b.txt\n") + member("b.txt", b"2") + END


def pax_size_past_the_end() -> bytes:
    """A PAX `size` record larger than the whole shard (the USTAR size field says 1 byte)."""
    return GOOD + pax(pax_record("path", "b.txt") + pax_record("size", "1000000")) + member("b.txt", b"2") + END


def version_with(directory: Path, data: bytes, samples: int = 2, first: str = "a", last: str = "b") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "shard-000000.tar").write_bytes(data)
    entry = ShardEntry("shard-000000.tar", samples, len(data), first, last)
    fields = [{"name": "txt", "type": "binary", "nullable": False}]
    (directory / "_manifest.json").write_bytes(Manifest([entry], fields, {}).to_json())
    return directory


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    """A shard as another tool writes it: Python's tarfile, members in the given order."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_234_567
            tar.addfile(info, io.BytesIO(data))
    return path


def tar_samples(paths) -> dict[str, dict[str, bytes]]:
    """key -> {field: payload} over shards, read with Python's tarfile."""
    samples: dict[str, dict[str, bytes]] = {}
    for path in paths:
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                key, _, field = member.name.partition(".")
                samples.setdefault(key, {})[field] = tar.extractfile(member).read()
    return samples


def tar_keys(paths) -> list[str]:
    """Sample keys in tar order (each key once)."""
    keys: list[str] = []
    for path in paths:
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                key = member.name.partition(".")[0]
                if not keys or keys[-1] != key:
                    keys.append(key)
    return keys
