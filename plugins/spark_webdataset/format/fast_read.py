"""The reader's fast path: whole chunks of a shard parsed into Arrow columns at once.

The exact parser (`sample_reader.iter_samples`) costs ~12 µs a sample of
1 KiB in Python (two member reads, a 512-byte `sum` for each checksum, a
regex a name, a Python object a payload), which capped the Spark reader
at a tenth of parquet. Here a shard is read in chunks of CHUNK_BYTES;
the member headers of a chunk are found by following the size fields
(`tar_rules.header_chain`: numpy parses every block's size field at once
when members are small), checked all together by the rulebook's
vectorized forms (`tar_rules.header_faults`: checksum, magic, regular
type, no USTAR prefix; `names.split_names`: plain `<key>.<field>`
names), grouped into samples, and the payloads of each
wanted field are gathered into one Arrow binary array by a single
`take` over the chunk: no Python object per member.

It handles only what our writer and common tools write for plain
WebDataset shards. At the first member it is not sure about (PAX or GNU
headers, base-256 sizes, a size past the shard's end or over the maximum
member size (`tar_rules`), a damaged header, an odd name, a field twice,
a key that comes back, a truncated tar) it hands over to the exact parser
at the start of the sample that member may belong to, with the keys
already read, so rows and errors (message, offset, key) are the exact
parser's from there on. No rule, constant or message is spelled here:
they are `tar_rules`' and `names`'.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from . import tar_rules
from .chunks import field_values, read_full
from .names import USTAR_NAME_BYTES, split_names
from .sample_reader import iter_samples
from .tar_rules import BLOCK, header_chain, header_faults, padded

CHUNK_BYTES = 8 << 20  # tar bytes parsed together; a multiple of BLOCK
SEEK_MEMBER_BYTES = 64 << 10  # key-only reads seek over members this large (as the exact parser does)
FALLBACK_ROWS = 1024  # rows a batch of the exact parser's samples holds
FALLBACK_BYTES = 32 << 20  # ... or payload bytes


@dataclass
class SampleBatch:
    """Consecutive samples of one shard: keys, and per wanted field a binary column (null: no member)."""

    keys: pa.Array  # string
    columns: dict[str, pa.Array]  # binary

    def filter(self, mask: pa.Array) -> SampleBatch:
        """The samples where `mask` is true (a key range), before anything is decoded."""
        return SampleBatch(self.keys.filter(mask), {name: column.filter(mask) for name, column in self.columns.items()})


# -- the reader ----------------------------------------------------------------------------------


class _Resume(io.RawIOBase):
    """The bytes the fast path holds, then the rest of the stream: where the exact parser takes over."""

    def __init__(self, held: bytes, stream: BinaryIO) -> None:
        self.held = memoryview(held)
        self.stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:  # type: ignore[override]
        if self.held:
            count = min(len(target), len(self.held))
            target[:count] = self.held[:count]
            self.held = self.held[count:]
            return count
        data = self.stream.read(len(target))
        target[: len(data)] = data
        return len(data)


def _gappy(buffer: bytearray, filled: int, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """A binary array over `buffer` whose even values are buffer[starts[i]:ends[i]] (odd: the gaps)."""
    if not len(starts):  # no sample (a field twice or a key back in the chunk's first): an empty array
        return pa.array([], pa.binary())
    offsets = np.empty(2 * len(starts), dtype=np.int64)
    offsets[0::2] = starts
    offsets[1::2] = ends
    wide = filled >= 2**31
    kind = pa.large_binary() if wide else pa.binary()
    data = pa.py_buffer(buffer)
    if not wide:
        offsets = offsets.astype(np.int32)
    return pa.Array.from_buffers(kind, len(offsets) - 1, [None, pa.py_buffer(offsets), data])


class _Chunk:
    """What one parse of the buffer found: samples to emit, and where to go on from."""

    def __init__(self) -> None:
        self.batch: SampleBatch | None = None
        self.keep = 0  # buffer position of the first byte still needed (a sample start)
        self.need = 0  # bytes from `keep` the next parse needs at least
        self.handover = False  # the exact parser reads on from `keep`
        self.end = False  # the end-of-archive blocks were seen


def read_sample_batches(
    stream: BinaryIO,
    fields: Sequence[str],
    chunk_bytes: int = CHUNK_BYTES,
    shard_bytes: int | None = None,
    max_member: int | str | None = None,
) -> Iterator[SampleBatch]:
    """The samples of the tar `stream`, a batch per chunk; the same rows and errors as `iter_samples`.

    `fields`: the field columns to build (members of other fields are
    skipped, their payloads never copied). Raises TarFormatError (offset,
    key) as the exact parser does. Sizes keep `tar_rules`: the shard ends
    where the stream does if it can seek, else at `shard_bytes` if given;
    a member past it or over `max_member` goes to the exact parser, which
    names it; the buffer never grows for bytes the shard does not hold.
    """
    wanted = list(dict.fromkeys(fields))
    finished: set[str] = set()
    limit = tar_rules.max_member_bytes(max_member)
    total = tar_rules.remaining(stream)
    total = shard_bytes if total is None else total  # tar bytes from buffer[0] at base 0, if known
    buffer = bytearray(chunk_bytes)
    filled = read_full(stream, memoryview(buffer)[:BLOCK])
    if not wanted and _seek_over_payloads(stream, buffer[:filled]):
        stream.seek(-filled, io.SEEK_CUR)
        yield from _exact(stream, wanted, 0, finished, total, limit)
        return
    base = 0  # tar offset of buffer[0]
    while True:
        got = read_full(stream, memoryview(buffer)[filled:])
        filled += got
        eof = filled < len(buffer)
        chunk = _parse(buffer, filled, eof, wanted, finished, None if total is None else total - base, limit)
        if chunk.batch is not None and len(chunk.batch.keys):
            yield chunk.batch
        if chunk.end and not chunk.handover:
            return
        if chunk.handover or eof:
            if stream.seekable():
                stream.seek(chunk.keep - filled, io.SEEK_CUR)
                yield from _exact(stream, wanted, base + chunk.keep, finished, total, limit)
            else:
                held = bytes(buffer[chunk.keep : filled])
                resumed = io.BufferedReader(_Resume(held, stream), 1 << 20)
                yield from _exact(resumed, wanted, base + chunk.keep, finished, total, limit)
            return
        carry = filled - chunk.keep
        need = -(-chunk.need // BLOCK) * BLOCK
        if total is None:  # the shard's end unknown: grow as its bytes arrive, never by a size alone
            need = min(need, 2 * len(buffer))
        size = max(chunk_bytes, 2 * carry, need)
        # a larger buffer for a sample larger than a chunk, else the carry moves to the front
        fresh = bytearray(size) if size > len(buffer) or 4 * size < len(buffer) else buffer
        fresh[:carry] = buffer[chunk.keep : filled]
        buffer, filled, base = fresh, carry, base + chunk.keep


def _seek_over_payloads(stream: BinaryIO, first: bytes) -> bool:
    """No payload wanted and large members (judged by the first): seeking past them beats reading them."""
    if len(first) < BLOCK or not stream.seekable():
        return False
    size = tar_rules.octal_size(first[tar_rules.SIZE[0] : tar_rules.SIZE[1]])
    return size is not None and size >= SEEK_MEMBER_BYTES


def _exact(
    stream: BinaryIO, wanted: list[str], offset: int, finished: set[str], total: int | None, limit: int
) -> Iterator[SampleBatch]:
    """The exact parser from `offset` on, its samples gathered into batches."""
    keys: list[str] = []
    columns: dict[str, list[bytes | None]] = {name: [] for name in wanted}
    size = 0
    samples = iter_samples(stream, set(wanted), offset=offset, finished=finished, shard_bytes=total, max_member=limit)
    for sample in samples:
        keys.append(sample.key)
        for name in wanted:
            value = sample.fields.get(name)
            columns[name].append(value)
            size += len(value) if value else 0
        if len(keys) >= FALLBACK_ROWS or size >= FALLBACK_BYTES:
            yield _batch_of(keys, columns)
            keys, columns, size = [], {name: [] for name in wanted}, 0
    if keys:
        yield _batch_of(keys, columns)


def _batch_of(keys: list[str], columns: dict[str, list[bytes | None]]) -> SampleBatch:
    return SampleBatch(
        pa.array(keys, pa.string()), {name: pa.array(values, pa.binary()) for name, values in columns.items()}
    )


def _parse(
    buffer: bytearray, filled: int, eof: bool, wanted: list[str], finished: set[str], left: int | None, limit: int
) -> _Chunk:
    """Parse buffer[:filled] (it starts at a header); emit the samples surely complete and valid.

    `left`: the shard's bytes from buffer[0] on (None: not known); `limit`: the maximum member size.
    """
    out = _Chunk()
    blocks_n = filled // BLOCK
    blocks = np.frombuffer(buffer, np.uint8, count=blocks_n * BLOCK).reshape(blocks_n, BLOCK)
    chain, stop, _ = header_chain(buffer, blocks, 0, dense=True)
    headers = np.asarray(chain, dtype=np.int64)
    rows = blocks[headers]
    _, sizes = tar_rules.octal_sizes(rows)
    positions = headers * BLOCK
    ends = positions + BLOCK + sizes
    # members here with their padding (the exact parser reads it: a tar cut inside it is truncated)
    complete = int(np.searchsorted(positions + BLOCK + padded(sizes), filled, side="right"))
    # a size past the shard's end or over the limit: from its sample on, the exact parser names it
    within = tar_rules.sizes_within(sizes, limit, positions + BLOCK, left)
    oversized = not within.all()
    if oversized:
        complete = min(complete, int(within.argmin()))
    faults = header_faults(rows[:complete])
    lengths, dot, name_faults = split_names(rows[:complete, :USTAR_NAME_BYTES])
    faults |= name_faults
    good = int(faults.argmax()) if faults.any() else complete
    handover = good < complete or oversized
    if not handover and stop >= 0 and complete == len(chain):
        # where the next header belongs there is no octal size field: the end, or for the exact parser
        ended = tar_rules.end_of_archive(blocks, stop)
        if ended is None:
            handover = eof  # one zero block, then the tar ends
        else:
            handover, out.end = not ended, ended  # not the end: damage, a base-256 size, ...
    # samples: runs of members with the same key
    new_key = np.ones(good, dtype=bool)
    if good > 1:
        width = int(dot[:good].max()) + 1
        keys = np.where(np.arange(width) < dot[:good, None], rows[:good, :width], np.uint8(0))
        new_key[1:] = (keys[1:] != keys[:-1]).any(axis=1)
    starts = np.flatnonzero(new_key)
    samples_n = len(starts) if out.end else max(len(starts) - 1, 0)  # the last may go on
    if samples_n:
        sample_of = np.cumsum(new_key) - 1
        members_n = _members(starts, samples_n, good)
        codes, distinct = field_values(rows[:members_n, :USTAR_NAME_BYTES], dot[:members_n], lengths[:members_n])
        repeated = _repeated(codes, sample_of[:members_n])
        if len(repeated):  # a field twice in a sample
            samples_n, handover = int(sample_of[repeated.min()]), True
        begin = positions[starts[:samples_n]]
        spans = _gappy(buffer, filled, begin, begin + dot[starts[:samples_n]])
        keys_array = spans.take(pa.array(np.arange(0, 2 * samples_n, 2))).cast(pa.string())
        listed = keys_array.to_pylist()
        if not finished.isdisjoint(listed) or len(set(listed)) < len(listed):
            seen = set(finished)  # a key comes back: the exact parser names it
            for index, key in enumerate(listed):
                if key in seen:
                    samples_n, handover = index, True
                    break
                seen.add(key)
            keys_array, listed = keys_array.slice(0, samples_n), listed[:samples_n]
        finished.update(listed)
        members_n = _members(starts, samples_n, good)
        payloads = _gappy(buffer, filled, positions[:members_n] + BLOCK, ends[:members_n])
        columns: dict[str, pa.Array] = {}
        code_of = {value: code for code, value in enumerate(distinct)}
        for name in wanted:
            code = code_of.get(name.encode(), -1)
            where = np.flatnonzero(codes[:members_n] == code)
            index = np.full(samples_n, -1, dtype=np.int64)
            index[sample_of[where]] = 2 * where
            column = payloads.take(pa.array(index, mask=index < 0))
            columns[name] = column if column.type == pa.binary() else column.cast(pa.binary())
        out.batch = SampleBatch(keys_array, columns)
    out.keep = int(positions[starts[samples_n]]) if samples_n < len(starts) else 0
    out.handover = handover
    if complete < len(chain):  # the next parse needs the whole next member
        out.need = int(positions[complete] + BLOCK + padded(int(sizes[complete]))) - out.keep + BLOCK
    return out


def _members(starts: np.ndarray, samples_n: int, good: int) -> int:
    """How many members the first `samples_n` samples hold."""
    return int(starts[samples_n]) if samples_n < len(starts) else good


def _repeated(codes: np.ndarray, sample_of: np.ndarray) -> np.ndarray:
    """Members that repeat a field of an earlier member of their sample."""
    order = np.lexsort((np.arange(len(codes)), codes, sample_of))
    same = (sample_of[order][1:] == sample_of[order][:-1]) & (codes[order][1:] == codes[order][:-1])
    return order[1:][same]
