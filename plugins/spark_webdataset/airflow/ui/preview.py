"""A bounded look at samples: the first N (or N at seeded random places) of a version or one shard,
or the sample with a given key.

A version with a sample index is read through it (`dataset/random_access.py`): random samples
are N seeded positions in key order and a key is one lookup, each sample one ranged read of
its own bytes. Versions without one (other tools' tars) are sampled by seeking: see
`random_samples`.

Shards are opened with the storage layer's `open_read` (ranged reads on
gs://) and parsed with `format.sample_reader.iter_members`; payloads of
fields that cannot be shown are skipped by seeking. Whatever the shard
size, a preview reads at most `budget` bytes: it stops at N samples or
at the budget, and says which.

A shard another tool wrote may hold keys our key rules refuse (`../evil`,
`/abs`, `a//b`, ...): such a sample is shown, but marked (`key_problem`
says which rule it breaks) and named in the preview's errors, which the
page shows as warnings. A key is only ever data here: it goes into
escaped HTML, never into a path or a URL.
"""

from __future__ import annotations

import base64
import io
import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO

from ...dataset.layout import Version
from ...dataset.random_access import VersionSamples
from ...errors import SampleMismatch, StorageError, TarFormatError
from ...format.names import key_error, split_member_name
from ...format.sample_reader import iter_members
from ...format.ustar import BLOCK
from ...storage.base import RangeFile

IMAGE_TYPES = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif"}
TEXT_FIELDS = {"txt", "text", "cls", "cls2", "json", "jsn", "caption", "index", "id"}
MAX_SAMPLES = 64
DEFAULT_BUDGET = 4 * 1024 * 1024
MAX_SHOWN_BYTES = 1024 * 1024  # a single field larger than this is shown as its size only
TEXT_PREVIEW_CHARS = 2000
SEARCH_BYTES = 256 * 1024  # how far a random pick looks for the next tar header


class BudgetSpent(Exception):
    pass


class _Budgeted(io.RawIOBase):
    """A read-only view of a stream that refuses to read more than its budget."""

    def __init__(self, stream: BinaryIO, budget: _Budget) -> None:
        self._stream = stream
        self._budget = budget

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._stream.seekable()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._stream.seek(offset, whence)

    def tell(self) -> int:
        return self._stream.tell()

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._budget.left + 1
        self._budget.spend(size)
        return self._stream.read(size)

    def readinto(self, buffer) -> int:  # pragma: no cover - iter_members uses read()
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


@dataclass
class _Budget:
    left: int

    def spend(self, size: int) -> None:
        if size > self.left:
            raise BudgetSpent()
        self.left -= size


FETCH_BYTES = 256 * 1024  # what one ranged GET of a gs:// or s3:// preview asks for


def _open_shard(version: Version, name: str) -> BinaryIO:
    """The shard through the storage layer. A gs:// or s3:// reader fetches 8 MiB per ranged GET
    (the storage layer's size for streaming whole shards); a preview asks for 256 KiB, so what it
    fetches stays near what it reads."""
    stream = version.storage.open_read(version.location_uri(name))
    if type(stream).__module__.startswith("google.cloud.storage") and hasattr(stream, "_chunk_size"):
        stream._chunk_size = FETCH_BYTES
    elif isinstance(stream, io.BufferedReader) and isinstance(stream.raw, RangeFile) and stream.tell() == 0:
        stream = io.BufferedReader(stream.detach(), buffer_size=FETCH_BYTES)  # s3://: nothing read yet, nothing lost
    return stream


def _shown(name: str) -> bool:
    parts = split_member_name(name)
    if parts is None:
        return False
    ext = parts[1].rsplit(".", 1)[-1].lower()
    return ext in IMAGE_TYPES or ext in TEXT_FIELDS


def describe_field(name: str, data: bytes | None, size: int, with_data_urls: bool = True) -> dict:
    ext = name.rsplit(".", 1)[-1].lower()
    entry: dict = {"field": name, "bytes": size}
    if data is None or size > MAX_SHOWN_BYTES:
        entry["kind"] = "binary"
        entry["type"] = IMAGE_TYPES.get(ext, "application/octet-stream")
        return entry
    if ext in IMAGE_TYPES:
        entry.update(kind="image", type=IMAGE_TYPES[ext])
        if with_data_urls:
            entry["data_url"] = f"data:{IMAGE_TYPES[ext]};base64," + base64.b64encode(data).decode()
        return entry
    text = data.decode("utf-8", "replace")
    if ext in ("json", "jsn"):
        entry["kind"] = "json"
        try:
            text = json.dumps(json.loads(text), ensure_ascii=False)
        except ValueError:
            entry["kind"] = "text"
    else:
        entry["kind"] = "text"
    entry["text"] = text[:TEXT_PREVIEW_CHARS]
    entry["truncated"] = len(text) > TEXT_PREVIEW_CHARS
    return entry


def _samples(stream: BinaryIO, shard: str, base: int = 0) -> Iterator[dict]:
    """Samples as adjacent members sharing a key; payloads only of fields that can be shown."""
    current: dict | None = None
    for member in iter_members(stream, read_data=_shown):
        parts = split_member_name(member.name)
        if not member.is_regular or parts is None:
            continue
        key, ext = parts
        if current is None or current["key"] != key:
            if current is not None:
                yield current
            current = {
                "key": key,
                "shard": shard,
                "offset": base + member.offset,
                "members": [],
                "key_problem": key_error(key),
            }
        current["members"].append((ext, member.data, member.size))
    if current is not None:
        yield current


def _finish(sample: dict, with_data_urls: bool) -> dict:
    fields = [describe_field(ext, data, size, with_data_urls) for ext, data, size in sample["members"]]
    label = next((f["text"].strip() for f in fields if f["field"] == "cls" and "text" in f), None)
    return {
        "key": sample["key"],
        "shard": sample["shard"],
        "offset": sample["offset"],
        "label": label,
        "key_problem": sample["key_problem"],
        "fields": fields,
    }


@dataclass
class Preview:
    samples: list[dict] = field(default_factory=list)
    stopped: str = "end"  # "count": N samples read; "budget": the byte budget ran out; "end": no more samples
    bytes_read: int = 0
    errors: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "samples": self.samples,
            "count": len(self.samples),
            "stopped": self.stopped,
            "bytes_read": self.bytes_read,
            "errors": self.errors,
        }

    def add(self, sample: dict, with_data_urls: bool) -> None:
        """A sample shown; one whose key breaks a key rule is also a warning among the errors."""
        self.samples.append(_finish(sample, with_data_urls))
        problem = sample["key_problem"]
        if problem is not None:
            self.errors.append(
                {
                    "shard": sample["shard"],
                    "offset": sample["offset"],
                    "key": sample["key"],
                    "error": f"sample at offset {sample['offset']}: key {sample['key']!r} breaks a key rule: {problem}",
                }
            )


@contextmanager
def _shard_errors(name: str, preview: Preview) -> Iterator[None]:
    """Around the reading of one shard: a spent budget marks the preview stopped ("budget");
    a shard that fails to open or parse is an error row of the preview, and the next shard follows."""
    try:
        yield
    except BudgetSpent:
        preview.stopped = "budget"
    except (TarFormatError, StorageError, OSError, ValueError) as error:
        preview.errors.append({"shard": name, "error": f"{type(error).__name__}: {error}"})


def _finished(preview: Preview, count: int, budget: int, spent: _Budget) -> Preview:
    if preview.stopped != "budget":
        preview.stopped = "count" if len(preview.samples) >= count else "end"
    preview.bytes_read = budget - spent.left
    return preview


def first_samples(
    version: Version,
    shards: list[tuple[str, int]],
    count: int,
    budget: int = DEFAULT_BUDGET,
    with_data_urls: bool = True,
) -> Preview:
    """The first `count` samples over `shards` (name, bytes) in order, reading at most `budget` bytes."""
    count = max(1, min(count, MAX_SAMPLES))
    spent = _Budget(budget)
    preview = Preview()
    for name, _size in shards:
        if len(preview.samples) >= count or preview.stopped == "budget":
            break
        with _shard_errors(name, preview), _open_shard(version, name) as raw:
            for sample in _samples(_Budgeted(raw, spent), name):
                preview.add(sample, with_data_urls)
                if len(preview.samples) >= count:
                    break
    return _finished(preview, count, budget, spent)


def _is_header(block: bytes) -> bool:
    if len(block) < BLOCK or block[257:262] != b"ustar" or not block[0]:
        return False
    try:
        stored = int(block[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        return False
    return stored == sum(block[:148]) + 8 * 32 + sum(block[156:BLOCK])


def _next_header(stream: BinaryIO, start: int, size: int) -> int | None:
    """Offset (from `start`) of the first tar header at or after `start`, reading 16 KiB at a time."""
    scanned = 0
    while scanned < SEARCH_BYTES and start + scanned < size:
        chunk = stream.read(min(16 * 1024, size - start - scanned))
        if not chunk:
            return None
        for i in range(0, len(chunk) - BLOCK + 1, BLOCK):
            if _is_header(chunk[i : i + BLOCK]):
                return scanned + i
        scanned += len(chunk)
    return None


def random_samples(
    version: Version,
    shards: list[tuple[str, int]],
    count: int,
    seed: int,
    budget: int = DEFAULT_BUDGET,
    with_data_urls: bool = True,
) -> Preview:
    """`count` samples at seeded random places: a shard (weighted by size), a 512-aligned offset in it,
    the next tar header found after it, and the first whole sample that starts after that header."""
    count = max(1, min(count, MAX_SAMPLES))
    rng = random.Random(seed)
    spent = _Budget(budget)
    preview = Preview()
    seen: set[tuple[str, int]] = set()
    sizes = [max(size, 1) for _, size in shards]
    attempts = 0
    while len(preview.samples) < count and attempts < count * 4 and shards and preview.stopped != "budget":
        attempts += 1
        name, size = rng.choices(shards, weights=sizes)[0]
        start = rng.randrange(0, max(size // BLOCK, 1)) * BLOCK
        with _shard_errors(name, preview), _open_shard(version, name) as raw:
            stream = _Budgeted(raw, spent)
            stream.seek(start)
            found = _next_header(stream, start, size)
            if found is None:
                continue
            stream.seek(start + found)
            first = True
            for sample in _samples(stream, name, base=start + found):
                if first and start + found > 0:  # may have begun mid-sample: take the next one
                    first = False
                    continue
                if (name, sample["offset"]) not in seen:
                    seen.add((name, sample["offset"]))
                    preview.add(sample, with_data_urls)
                break
    preview.samples.sort(key=lambda s: (s["shard"], s["offset"]))
    return _finished(preview, count, budget, spent)


def _indexed(samples: VersionSamples, entries: Iterator, count: int, budget: int, with_data_urls: bool) -> Preview:
    """The samples the index `entries` locate, each one ranged read, until `count` or the budget."""
    preview = Preview()
    left = budget
    for entry in entries:
        if len(preview.samples) >= count:
            break
        if entry.length > left:
            preview.stopped = "budget"
            break
        left -= entry.length
        try:
            sample = samples.read(entry)
        except (SampleMismatch, StorageError, OSError) as error:
            preview.errors.append(
                {
                    "shard": entry.shard,
                    "offset": entry.offset,
                    "key": entry.key,
                    "error": f"{type(error).__name__}: {error}",
                }
            )
            continue
        key = sample.pop("__key__")
        preview.add(
            {
                "key": key,
                "shard": entry.shard,
                "offset": entry.offset,
                "key_problem": key_error(key),
                "members": [(field, data, len(data or b"")) for field, data in sample.items()],
            },
            with_data_urls,
        )
    if preview.stopped != "budget":
        preview.stopped = "count" if len(preview.samples) >= count else "end"
    preview.bytes_read = budget - left
    return preview


def indexed_random_samples(
    samples: VersionSamples, count: int, seed: int, budget: int = DEFAULT_BUDGET, with_data_urls: bool = True
) -> Preview:
    """`count` distinct samples at seeded random positions in key order, read by the sample index."""
    count = max(1, min(count, MAX_SAMPLES))
    positions = sorted(random.Random(seed).sample(range(len(samples)), min(count, len(samples))))
    return _indexed(samples, (samples.locate_at(p) for p in positions), count, budget, with_data_urls)


def sample_by_key(
    samples: VersionSamples, key: str, budget: int = DEFAULT_BUDGET, with_data_urls: bool = True
) -> Preview:
    """The sample with `key` (one index lookup, one ranged read); none found is an error row."""
    entry = samples.locate(key)
    if entry is None:
        preview = Preview()
        preview.errors.append({"shard": None, "key": key, "error": f"no sample with key {key!r} in this version"})
        return preview
    return _indexed(samples, iter([entry]), 1, budget, with_data_urls)
