"""A streaming, deterministic writer of WebDataset tar shards from Arrow batches.

It knows every sample's exact tar size before writing a byte, so a shard
never exceeds `max_shard_bytes` (end-of-archive blocks included) unless a
single sample is larger, which then gets a shard of its own. Small members
are assembled a batch at a time by Arrow's C++ kernels (headers from a
numpy template, payload bytes copied once); large members are written
straight from the Arrow buffers, with no copy in Python at all. Memory is
one batch plus what the kernels build from it. It also records where each
sample lies (shard, offset, length, crc32c of its bytes): the rows of the
version's sample index.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InvalidField, InvalidKey, InvalidMemberName
from . import ustar
from .checksums import CRC32C, SHA256, crc32c_prefixes, crc32c_text, slice_crcs
from .names import (
    INVALID_KEY_PATTERN,
    USTAR_NAME_BYTES,
    field_error,
    field_name_error,
    first_invalid_key,
    member_name,
    member_name_error,
)
from .sample_index import task_rows

log = logging.getLogger(__name__)

# Above this mean member size, per-member writes cost less than copying.
DIRECT_WRITE_MEMBER_BYTES = 32 * 1024
MIN_SHARD_BYTES = ustar.BLOCK + len(ustar.END_OF_ARCHIVE)
# The shard cap when none is given: the writer's option maxShardBytes, the jobs' --max-shard-bytes
# and a dataset config's max_shard_bytes all default to this one value.
DEFAULT_MAX_SHARD_BYTES = 3 * 1024**3
# At most this many bytes a write(2). On Linux 6.x ext4 a write of 1 MiB or more gets large page-cache
# folios, and on a VM whose free memory the host takes back (free page reporting: Firecracker, balloon
# drivers) filling those ran at 0.27-0.3 GB/s here against 3.5-4.5 GB/s for writes of 64-512 KiB: it was
# most of a 100 KiB write job's time in Spark (bench/README.md, "The write size"). In process, where
# freed pages come straight back, 512 KiB costs 2-5 % more than 1 MiB, 256 KiB 10-20 %; in Spark jobs
# no size from 4 KiB to 512 KiB did measurably better than another.
WRITE_BYTES = 512 << 10
GROUP_BYTES = WRITE_BYTES  # pieces hashed, then written, together (see _HashingSink.write_pieces)
_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16


@dataclass(frozen=True)
class ShardInfo:
    """One finished shard, as the writer saw it."""

    sequence: int  # 0, 1, ... within this writer
    samples: int
    bytes: int
    crc32c: str  # Castagnoli, base64 of the big-endian value (GCS's form)
    first_key: str
    last_key: str
    oversize: bool = False
    sha256: str | None = None  # only with checksum="sha256"


def _file_descriptor(stream: BinaryIO) -> int | None:
    """The descriptor of a plain local file (a FileIO, or a BufferedWriter over one), else None.

    The sink then writes through the descriptor itself: a BufferedWriter
    copies every payload under its buffer size (1 MiB) into that buffer
    first; in the Spark workers' profiles of 100 KiB samples that copy cost
    as much as the kernel's own. The stream's buffer is flushed once here
    and never used again.
    """
    raw = stream.raw if isinstance(stream, io.BufferedWriter) else stream
    if not isinstance(raw, io.FileIO) or raw.closed:
        return None
    stream.flush()
    return raw.fileno()


def _writev_all(fd: int, group: list[bytes | memoryview | np.ndarray]) -> None:
    """One os.writev of `group`, resumed after a short write."""
    while group:
        written = os.writev(fd, group)
        if written == sum(map(len, group)):  # the usual case: no Python step a piece
            return
        while written >= len(group[0]):
            written -= len(group.pop(0))
        group[0] = memoryview(group[0])[written:]


def _write_all(fd: int, pieces: Sequence[bytes | np.ndarray]) -> None:
    """Write `pieces` in order, WRITE_BYTES and IOV_MAX pieces at most a call (a larger piece is split)."""
    group: list[bytes | memoryview | np.ndarray] = []
    room = WRITE_BYTES
    for piece in pieces:
        if len(piece) > room:
            view = piece if isinstance(piece, np.ndarray) else memoryview(piece)
            while len(view) > room:  # its head fills this call
                group.append(view[:room])
                _writev_all(fd, group)
                group, view, room = [], view[room:], WRITE_BYTES
            piece = view
        if len(piece):
            group.append(piece)
            room -= len(piece)
        if len(group) == _IOV_MAX or not room:
            _writev_all(fd, group)
            group, room = [], WRITE_BYTES
    if group:
        _writev_all(fd, group)


class _HashingSink:
    """Counts what goes to the shard's stream and takes its crc32c (and sha256 if asked).

    `data` is bytes or a 1-D uint8 numpy array: both go to the crc32c in
    place (google_crc32c copies a memoryview first). A local file is written
    through its descriptor with os.writev, many pieces a call, copied by the
    kernel only (see `_file_descriptor`).
    """

    def __init__(self, stream: BinaryIO, sha256: bool = False) -> None:
        self.stream = stream
        self.crc = 0
        self.digest = hashlib.sha256() if sha256 else None
        self.size = 0
        self._fd = _file_descriptor(stream)

    def write(self, data: bytes | np.ndarray) -> None:
        if (
            isinstance(data, np.ndarray) and len(data) > GROUP_BYTES
        ):  # a large buffer: hashed and written a group at a time
            self.write_slices(data, np.arange(0, len(data) + GROUP_BYTES, GROUP_BYTES).clip(max=len(data)))
        else:
            self.write_pieces((data if isinstance(data, (bytes, np.ndarray)) else bytes(data),))

    def write_pieces(self, pieces: Sequence[bytes | np.ndarray]) -> list[int]:
        """Write `pieces` in order, as one stream of bytes; the stream's crc32c before the first
        piece and after each one (`crc32c_prefixes`: each piece's own crc32c follows from them).

        A group of about GROUP_BYTES is hashed and then written while it is
        still in the CPU cache (hashing a whole batch first, then writing it,
        read every byte from memory twice: slower in the Spark workers).
        """
        prefixes = [self.crc]
        if not pieces:
            return prefixes
        ends = np.fromiter(accumulate(map(len, pieces)), np.int64, len(pieces))  # in C: no Python step a piece
        # Each group ends with the first piece that reaches the next GROUP_BYTES of the stream.
        stops = np.searchsorted(ends, np.arange(GROUP_BYTES, int(ends[-1]) + GROUP_BYTES, GROUP_BYTES), side="left") + 1
        start = 0
        for stop in np.unique(np.append(np.minimum(stops, len(pieces)), len(pieces))).tolist():
            group = pieces[start:stop]
            self._hash(group, prefixes)
            self._emit(group)
            self.size += int(ends[stop - 1]) - (int(ends[start - 1]) if start else 0)
            start = stop
        return prefixes

    def write_slices(self, data: np.ndarray, bounds: np.ndarray) -> list[int]:
        """Write `data[bounds[0]:bounds[-1]]`, a group of about GROUP_BYTES at a time, each group
        one contiguous write; the stream's crc32c at every bound (as `write_pieces`)."""
        prefixes = [self.crc]
        digest = self.digest
        count = len(bounds) - 1
        if count <= 0:
            return prefixes
        lengths = np.diff(bounds)
        first = int(bounds[0])
        # Group ends: the first bound at or past each GROUP_BYTES step (one slice a group at least).
        steps = np.arange(first + GROUP_BYTES, int(bounds[-1]) + GROUP_BYTES, GROUP_BYTES)
        ends = np.unique(np.minimum(np.searchsorted(bounds, steps, side="left"), count)).tolist()
        start = 0
        starts = bounds[:-1].tolist()
        stops = bounds[1:].tolist()
        uniform = bool(count) and int(lengths.min()) == int(lengths.max()) and int(lengths[0]) > 0
        for end in ends:
            if end <= start:
                continue
            low, high = starts[start], stops[end - 1]
            if uniform:  # equal slices: the rows of a 2-D view, iterated in C
                prefixes.extend(crc32c_prefixes(prefixes[-1], data[low:high].reshape(end - start, -1))[1:])
            else:
                prefixes.extend(
                    crc32c_prefixes(
                        prefixes[-1], map(data.__getitem__, map(slice, starts[start:end], stops[start:end]))
                    )[1:]
                )
            if digest is not None:
                digest.update(data[low:high])
            self._emit((data[low:high],))
            self.size += high - low
            start = end
        self.crc = prefixes[-1]
        return prefixes

    def _hash(self, group: Sequence[bytes | np.ndarray], prefixes: list[int]) -> None:
        prefixes.extend(crc32c_prefixes(prefixes[-1], group)[1:])
        self.crc = prefixes[-1]
        if self.digest is not None:
            for piece in group:
                self.digest.update(piece)

    def _emit(self, pieces: Sequence[bytes | np.ndarray]) -> None:
        if self._fd is not None:
            _write_all(self._fd, pieces)
        else:
            for piece in pieces:
                self.stream.write(piece)


@dataclass
class _OpenShard:
    sink: _HashingSink
    samples: int = 0
    first_key: str = ""
    last_key: str = ""
    oversize: bool = False


def _binary_parts(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a large_binary/large_string array, offsets absolute into data."""
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


class ShardWriter:
    """Writes samples to shards `open_shard(0)`, `open_shard(1)`, ...

    `fields` are the member extensions in column order; `write_batch` takes
    the key column and one encoded large_binary column per field.
    """

    def __init__(
        self,
        fields: Sequence[str],
        open_shard: Callable[[int], BinaryIO],
        max_shard_bytes: int,
        max_samples_per_shard: int | None = None,
        mtime: int = 0,
        allow_pax: bool = False,
        checksum: str = CRC32C,
    ) -> None:
        # checksum, the cap and the sample count are options: spark/options.py (build_rules) checked them
        for name in fields:
            problem = field_error(name) or field_name_error(name, allow_pax)
            if problem:
                raise InvalidField(f"column {name!r}: {problem}")
        self.fields = list(fields)
        self._suffixes = [("." + f).encode() for f in self.fields]
        self._open_shard = open_shard
        self.max_shard_bytes = max_shard_bytes
        self.max_samples = max_samples_per_shard or (1 << 62)
        self.mtime = mtime
        self.allow_pax = allow_pax
        self.checksum = checksum  # crc32c always; sha256 as well only when asked (it costs ~0.5 ns a byte)
        self._template = ustar.header_template(mtime)
        self._zeros = np.zeros(ustar.BLOCK, dtype=np.uint8)
        self._shard: _OpenShard | None = None
        self._streams: list[BinaryIO] = []
        self.shards: list[ShardInfo] = []
        self.samples = 0
        self.index_rows: list[pa.RecordBatch] = []  # TASK_SCHEMA: where each sample went

    # -- validation -------------------------------------------------------

    def _check_keys(self, keys: pa.Array) -> None:
        bad = pc.match_substring_regex(keys, INVALID_KEY_PATTERN)
        if keys.null_count or pc.any(bad).as_py():
            found = first_invalid_key(keys.to_pylist())
            if found:
                row, key, problem = found
                raise InvalidKey(f"invalid sample key {key!r} (row {self.samples + row} of this task): {problem}")

    def _check_samples(self, keys: pa.Array, columns: Sequence[pa.Array]) -> bool:
        """Check that every sample has a member and every name fits; True if the fast path applies."""
        present = pc.is_valid(columns[0])
        for column in columns[1:]:
            present = pc.or_(present, pc.is_valid(column))
        if not pc.all(present).as_py():
            row = pc.index(present, False).as_py()
            raise InvalidField(
                f"sample {keys[row].as_py()!r}: every field is null, so the sample would have no "
                "member and be lost (drop the row or give it a field)"
            )
        key_bytes = pc.binary_length(keys)
        longest = max(len(s) for s in self._suffixes)
        fits = pc.max(key_bytes).as_py() + longest <= USTAR_NAME_BYTES
        if fits and pc.all(pc.string_is_ascii(keys)).as_py():
            return True
        if not self.allow_pax:
            for row, key in enumerate(keys.to_pylist()):
                for field, column in zip(self.fields, columns):
                    if column[row].is_valid:
                        problem = member_name_error(member_name(key, field), False)
                        if problem:
                            raise InvalidMemberName(f"sample {key!r}, field {field!r}: {problem}")
        return False

    # -- batch assembly ---------------------------------------------------

    def _names(self, keys: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(n, 100) NUL-padded key bytes, the key lengths and the keys' byte sums."""
        offsets, data = _binary_parts(keys.cast(pa.large_binary()))
        lengths = np.diff(offsets)
        names = np.zeros((len(keys), USTAR_NAME_BYTES), dtype=np.uint8)
        rows = np.repeat(np.arange(len(keys)), lengths)
        cols = np.arange(offsets[-1] - offsets[0]) - np.repeat(offsets[:-1] - offsets[0], lengths)
        key_bytes = data[offsets[0] : offsets[-1]]
        names[rows, cols] = key_bytes
        running = np.zeros(len(key_bytes) + 1, dtype=np.int64)
        np.cumsum(key_bytes, out=running[1:])
        relative = offsets - offsets[0]
        return names, lengths, running[relative[1:]] - running[relative[:-1]]

    def _headers(
        self, names: np.ndarray, key_lengths: np.ndarray, key_sums: np.ndarray, field: int, sizes: np.ndarray
    ) -> np.ndarray:
        suffix = self._suffixes[field]
        field_names = names.copy()
        rows = np.arange(len(key_lengths))
        for position, byte in enumerate(suffix):
            field_names[rows, key_lengths + position] = byte
        return ustar.build_headers(self._template, field_names, sizes, key_sums + sum(suffix))

    def _fast_batch(self, keys: pa.Array, columns: Sequence[pa.Array]):
        """Sample sizes and an emitter for the vectorized path."""
        count = len(keys)
        names, key_lengths, key_sums = self._names(keys)
        member_sizes = []
        headers = []
        for index, column in enumerate(columns):
            sizes = pc.fill_null(pc.binary_length(column), 0).to_numpy(zero_copy_only=False).astype(np.int64)
            present = column.is_valid().to_numpy(zero_copy_only=False)
            member_sizes.append(np.where(present, ustar.BLOCK + sizes + (-sizes % ustar.BLOCK), 0))
            headers.append((self._headers(names, key_lengths, key_sums, index, sizes), sizes))
        sample_sizes = np.sum(member_sizes, axis=0) if member_sizes else np.zeros(count, np.int64)
        members = sum(len(column) - column.null_count for column in columns)
        mean_member = sum(int(sizes.sum()) for _, sizes in headers) / max(1, members)
        if mean_member >= DIRECT_WRITE_MEMBER_BYTES:
            return sample_sizes, self._direct_emitter(columns, headers)
        return sample_sizes, self._joined_emitter(columns, headers, count)

    def _joined_emitter(self, columns, headers, count: int):
        pieces: list[pa.Array] = []
        for column, (header_rows, sizes) in zip(columns, headers):
            validity = pc.is_valid(column).buffers()[1]
            header_offsets = pa.py_buffer(np.arange(count + 1, dtype=np.int64) * ustar.BLOCK)
            pads = -sizes % ustar.BLOCK
            pad_offsets = np.zeros(count + 1, dtype=np.int64)
            np.cumsum(pads, out=pad_offsets[1:])
            pieces.append(
                pa.LargeBinaryArray.from_buffers(
                    pa.large_binary(), count, [validity, header_offsets, pa.py_buffer(header_rows)]
                )
            )
            pieces.append(column)
            pieces.append(
                pa.LargeBinaryArray.from_buffers(
                    pa.large_binary(),
                    count,
                    [validity, pa.py_buffer(pad_offsets), pa.py_buffer(bytes(int(pad_offsets[-1])))],
                )
            )
        joined = pc.binary_join_element_wise(
            *pieces, pa.scalar(b"", pa.large_binary()), null_handling="replace", null_replacement=""
        )
        offsets, data = _binary_parts(joined)

        def emit(start: int, stop: int, sink: _HashingSink) -> Sequence[int]:
            return sink.write_slices(data, offsets[start : stop + 1])

        return emit

    def _direct_emitter(self, columns, headers):
        parts = [_binary_parts(column) for column in columns]
        valid = [column.is_valid().to_numpy(zero_copy_only=False) for column in columns]
        zeros = self._zeros

        def emit(start: int, stop: int, sink: _HashingSink) -> Sequence[int]:
            # Views into the Arrow buffers and the header rows, handed to the sink together: no copy.
            fields = [
                (header_rows, data, offsets[start : stop + 1].tolist(), (-sizes[start:stop] % ustar.BLOCK).tolist(),
                 present[start:stop].tolist())
                for (offsets, data), present, (header_rows, sizes) in zip(parts, valid, headers)
            ]  # fmt: skip
            pieces: list[np.ndarray] = []
            add = pieces.append
            bounds = [0]
            for index in range(stop - start):
                for header_rows, data, ends, pads, present in fields:
                    if present[index]:
                        add(header_rows[start + index])
                        add(data[ends[index] : ends[index + 1]])
                        if pads[index]:
                            add(zeros[: pads[index]])
                bounds.append(len(pieces))
            return np.array(sink.write_pieces(pieces), dtype=np.uint32)[bounds]

        return emit

    def _pax_batch(self, keys: pa.Array, columns: Sequence[pa.Array]):
        """The slow path, only for batches with names that need PAX headers."""
        key_list = keys.to_pylist()
        values = [column.to_pylist() for column in columns]
        blobs: list[bytes] = []
        for row, key in enumerate(key_list):
            members = []
            for field, column_values in zip(self.fields, values):
                payload = column_values[row]
                if payload is None:
                    continue
                name = member_name(key, field)
                encoded = name.encode()
                if len(encoded) <= USTAR_NAME_BYTES and name.isascii():
                    header = ustar.build_header(self._template, encoded, len(payload))
                else:
                    header = ustar.pax_member(self.mtime, name, len(payload))
                members += [header, payload, bytes(ustar.padding(len(payload)))]
            blobs.append(b"".join(members))
        sizes = np.array([len(blob) for blob in blobs], dtype=np.int64)

        def emit(start: int, stop: int, sink: _HashingSink) -> Sequence[int]:
            return sink.write_pieces(blobs[start:stop])

        return sizes, emit

    # -- shards -----------------------------------------------------------

    def _open(self) -> _OpenShard:
        stream = self._open_shard(len(self.shards))
        self._streams.append(stream)
        self._shard = _OpenShard(_HashingSink(stream, sha256=self.checksum == SHA256))
        return self._shard

    def _close_shard(self) -> None:
        shard = self._shard
        if shard is None:
            return
        shard.sink.write(ustar.END_OF_ARCHIVE)
        shard.sink.stream.close()
        self.shards.append(
            ShardInfo(
                sequence=len(self.shards),
                samples=shard.samples,
                bytes=shard.sink.size,
                crc32c=crc32c_text(shard.sink.crc),
                first_key=shard.first_key,
                last_key=shard.last_key,
                oversize=shard.oversize,
                sha256=shard.sink.digest.hexdigest() if shard.sink.digest is not None else None,
            )
        )
        if shard.oversize:
            log.warning(
                "sample %r is %d tar bytes, over maxShardBytes=%d: it has a shard of its own",
                shard.first_key,
                shard.sink.size,
                self.max_shard_bytes,
            )
        self._shard = None

    def write_batch(self, keys: pa.Array, columns: Sequence[pa.Array]) -> None:
        """Append a batch of samples; `columns` are encoded large_binary arrays, one per field."""
        count = len(keys)
        if count == 0:
            return
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        keys = keys.cast(pa.large_string())
        self._check_keys(keys)
        if self._check_samples(keys, columns):
            sample_sizes, emit = self._fast_batch(keys, columns)
        else:
            sample_sizes, emit = self._pax_batch(keys, columns)
        ends = np.cumsum(sample_sizes)
        limit = self.max_shard_bytes - len(ustar.END_OF_ARCHIVE)
        start = 0
        while start < count:
            shard = self._shard or self._open()
            used = shard.sink.size
            before = int(ends[start - 1]) if start else 0
            fit = int(np.searchsorted(ends, before + (limit - used), side="right")) - start
            take = min(fit, self.max_samples - shard.samples, count - start)
            if take <= 0:
                if shard.samples:
                    self._close_shard()
                    continue
                take = 1
                shard.oversize = True
            stop = start + take
            # The shard's crc32c at every sample's bounds; each byte is hashed once, and a sample's own
            # crc32c follows from the crc32c before and after it (checksums.slice_crcs).
            lengths = sample_sizes[start:stop]
            crcs = slice_crcs(emit(start, stop, shard.sink), lengths)
            offsets = used + (ends[start:stop] - lengths - before)
            self.index_rows.append(task_rows(keys.slice(start, take), len(self.shards), offsets, lengths, crcs))
            if not shard.samples:
                shard.first_key = keys[start].as_py()
            shard.samples += take
            shard.last_key = keys[stop - 1].as_py()
            self.samples += take
            start = stop
            if shard.oversize or shard.samples >= self.max_samples:
                self._close_shard()

    def close(self) -> list[ShardInfo]:
        self._close_shard()
        return self.shards

    def discard(self) -> None:
        """Close every stream without finishing; the caller removes the files."""
        for stream in self._streams:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - best effort on the failure path
                pass
        self._shard = None
