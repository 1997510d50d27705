"""The sample index: where every sample of a version lies, sorted by key.

One file a version (or a layer): `key`, `shard` (its name in the manifest),
`offset` (of the sample's first header), `length` (all its members,
headers and padding: a sample's bytes are contiguous) and `crc32c` of those
bytes, sorted by key, in blocks (parquet row groups) of `BLOCK_ROWS` rows with
min/max statistics on the key only. Up to SEGMENT_BLOCKS blocks it is one
parquet file whose footer is the directory; past that, segments of parquet
files and a directory of them (index_segments). A lookup by key reads the
directory once, then one block; by position, the blocks' row counts say which.
Parquet because pyarrow reads one block of it by ranged reads.

The index is also what proves keys unique: each writer task sorts its rows
into a run (`TASK_SCHEMA`, the shard as the task's sequence number), and
the commit merges the runs and the version's index into the next index.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import functools
import io
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptIndex, WebDatasetError
from . import key_filter
from .index_segments import (
    SEGMENT_BLOCKS,
    Segment,
    SegmentedWriter,
    Window,
    block_filters,
    check_block_filter,
    check_segment,
    open_segments,
)
from .keys import key_column
from .tar_rules import BLOCK

if TYPE_CHECKING:  # imported where used: a writer task needs only the Arrow run, not parquet
    import pyarrow.parquet as pq

INDEX_KIND = "spark-webdataset-sample-index-v1"  # the schema's metadata (store_schema=False: not in the file)
# 8192 rows a block: a million synthetic samples (tests/unit/format/test_sample_index.py) gave a
# footer under 64 KiB (one read) and 47 KiB blocks; other sizes were not benchmarked.
BLOCK_ROWS = 8192
INDEX_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("shard", pa.string()),
        ("offset", pa.int64()),
        ("length", pa.int64()),
        ("crc32c", pa.uint32()),
    ],
    metadata={"kind": INDEX_KIND},
)
# A writer task's run: the same rows, its shards by sequence number (final names come at the commit).
TASK_SCHEMA = pa.schema([("key", pa.large_string()), ("shard", pa.int32()), *list(INDEX_SCHEMA)[2:]])
# Rows as the commit merges them: the tasks' large keys, the shards' final names.
MERGE_SCHEMA = pa.schema([("key", pa.large_string()), *list(INDEX_SCHEMA)[1:]])
# A block read into memory is at most this large (uncompressed, by the footer): 8192 rows of keys
# of a few KiB; a footer that claims more is damage, refused before a byte is decompressed.
MAX_BLOCK_BYTES = 64 << 20
MAX_BLOCK_ROWS = 1 << 20
# What reading a damaged parquet file raises (pyarrow's errors are ValueError/OSError subclasses).
_DAMAGE = (
    pa.ArrowException,
    OSError,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    MemoryError,
    EOFError,
    OverflowError,
)


def task_rows(keys: pa.Array, shard: int, offsets, lengths, crcs) -> pa.RecordBatch:
    """One shard's slice of a batch as index rows (the keys copied: a slice of an IPC batch keeps it alive)."""
    count = len(keys)
    return pa.record_batch(
        [
            pa.concat_arrays([keys.cast(pa.large_string())]),
            pa.array(np.full(count, shard, np.int32)),
            pa.array(np.asarray(offsets, np.int64)),
            pa.array(np.asarray(lengths, np.int64)),
            pa.array(np.asarray(crcs, np.uint32)),
        ],
        schema=TASK_SCHEMA,
    )


def named_rows(rows: pa.RecordBatch, shard_names: pa.Array) -> pa.RecordBatch:
    """A task's rows with its shard numbers replaced by the shards' final names (INDEX_SCHEMA's
    columns; the key stays as the task wrote it)."""
    return pa.record_batch(
        [rows.column(0), shard_names.take(rows.column(1)), *rows.columns[2:]], names=INDEX_SCHEMA.names
    )


def write_task_run(rows: pa.RecordBatch, sink: BinaryIO) -> None:
    """A task's sorted rows (TASK_SCHEMA) as the Arrow stream the commit reads back."""
    with pa.ipc.new_stream(sink, TASK_SCHEMA) as ipc:
        ipc.write_table(pa.Table.from_batches([rows], TASK_SCHEMA), max_chunksize=65536)


def concat_rows(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    """Batches as one (an empty one of `schema` for none)."""
    return pa.concat_batches(batches) if batches else pa.RecordBatch.from_pylist([], schema=schema)


def write_index(batches: Iterable[pa.RecordBatch], sink: str | BinaryIO, segment_blocks: int | None = None) -> int:
    """Write sorted index rows (INDEX_SCHEMA's columns) to `sink` in blocks of BLOCK_ROWS, in segments
    of `segment_blocks` blocks (default SEGMENT_BLOCKS; index_segments); the row count."""
    pending: list[pa.RecordBatch] = []
    buffered = 0
    rows = 0
    import pyarrow.parquet as pq

    def new_writer(out: BinaryIO) -> pq.ParquetWriter:
        return pq.ParquetWriter(
            out,
            INDEX_SCHEMA,
            compression="zstd",
            use_dictionary=["shard"],
            write_statistics=["key"],
            store_schema=False,
        )

    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(sink, "wb")) if isinstance(sink, str) else sink
        segments = SegmentedWriter(out, new_writer, (segment_blocks or SEGMENT_BLOCKS) * BLOCK_ROWS)

        def flush(final: bool) -> None:
            nonlocal pending, buffered
            if not pending:
                return
            table = pa.Table.from_batches(pending, INDEX_SCHEMA).combine_chunks()
            whole = len(table) if final else len(table) - len(table) % BLOCK_ROWS
            if whole:
                segments.write(table.slice(0, whole), BLOCK_ROWS)
            rest = table.slice(whole)
            pending = rest.to_batches() if len(rest) else []
            buffered = len(rest)

        for batch in batches:
            batch = batch.cast(INDEX_SCHEMA) if batch.schema != INDEX_SCHEMA else batch
            pending.append(batch)
            buffered += len(batch)
            rows += len(batch)
            if buffered >= BLOCK_ROWS:
                flush(final=False)
        flush(final=True)
        segments.close()
    return rows


@dataclass(frozen=True)
class Entry:
    """Where one sample lies."""

    key: str
    shard: str
    offset: int
    length: int
    crc32c: int


def check_entry(entry: Entry, shard_bytes: Mapping[str, int], index: str) -> Entry:
    """`entry` if it can be where it says (CorruptIndex naming the `index` file and the key if not):
    a shard the manifest lists (`shard_bytes`: location -> its bytes), an offset and a length on
    tar blocks, the sample inside the shard, a crc32c. Checked before any byte is read, so a
    damaged row costs no request and no allocation of its length."""

    def refuse(rule: str) -> CorruptIndex:
        return CorruptIndex(
            f"{index}: the row of sample {entry.key!r} ({entry.shard!r}, offset {entry.offset}, "
            f"length {entry.length}) {rule}: the index is damaged"
        )

    size = shard_bytes.get(entry.shard) if isinstance(entry.shard, str) else None
    if size is None:
        raise refuse("names a shard the manifest does not list")
    if not isinstance(entry.offset, int) or entry.offset < 0 or entry.offset % BLOCK:
        raise refuse(f"has an offset that is not a multiple of {BLOCK} >= 0")
    if not isinstance(entry.length, int) or entry.length <= 0 or entry.length % BLOCK:
        raise refuse(f"has a length that is not a multiple of {BLOCK} > 0")
    if entry.offset + entry.length > size:
        raise refuse(f"ends past the end of its shard ({size} bytes by the manifest)")
    if not isinstance(entry.crc32c, int):
        raise refuse("has no crc32c")
    return entry


@contextlib.contextmanager
def damage_named(name: str) -> Iterator[None]:
    """What pyarrow (or the bytes it decodes) raises on a damaged file, as CorruptIndex naming it."""
    try:
        yield
    except WebDatasetError:
        raise
    except _DAMAGE as error:
        text = str(error).splitlines()[0][:300] if str(error) else ""
        raise CorruptIndex(f"{name}: not a readable sample index ({type(error).__name__}: {text})") from None


def _check_schema(schema: pa.Schema, name: str) -> None:
    problems = []
    for wanted in INDEX_SCHEMA:
        at = schema.get_field_index(wanted.name)
        found = schema.field(at).type if at >= 0 else None
        if found != wanted.type and not (wanted.name == "key" and found == pa.large_string()):
            problems.append(f"{wanted.name!r} is {'missing' if found is None else found}, not {wanted.type}")
    if problems:
        raise CorruptIndex(f"{name}: not a sample index: column {'; column '.join(problems)}")


def _check_group(group: pq.RowGroupMetaData, number: int, name: str) -> None:
    if not 0 <= group.num_rows <= MAX_BLOCK_ROWS or not 0 <= group.total_byte_size <= MAX_BLOCK_BYTES:
        raise CorruptIndex(
            f"{name}: block {number} claims {group.num_rows} rows of {group.total_byte_size} bytes "
            f"(at most {MAX_BLOCK_ROWS} rows, {MAX_BLOCK_BYTES} bytes): the index is damaged"
        )


class _Keys:
    """A sorted Arrow string column as a sequence `bisect` can search (log n scalars read, no copy)."""

    def __init__(self, keys: pa.Array) -> None:
        self.keys = keys

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, at: int) -> str:
        return self.keys[at].as_py()


class _Block:
    def __init__(self, table: pa.Table, rows: int, name: str) -> None:
        if table.num_rows != rows or table.column("key").null_count:
            raise CorruptIndex(
                f"{name}: a block of {table.num_rows} rows (the footer says {rows}) "
                f"with {table.column('key').null_count} null keys: the index is damaged"
            )
        table = table.combine_chunks()
        self.table = table
        self.keys = table.column("key").chunk(0) if table.num_rows else pa.array([], pa.string())

    @functools.cached_property
    def _rows(self) -> tuple[list, list, list, list]:
        """Shard, offset, length and crc32c columns as lists, on the first entry asked of the block (a
        block read to be scanned, not looked up in, never pays the ~0.9 ms of 8,192 rows)."""
        return tuple(self.table.column(name).to_pylist() for name in ("shard", "offset", "length", "crc32c"))  # type: ignore[return-value]

    def entry(self, row: int) -> Entry:
        shards, offsets, lengths, crcs = self._rows
        return Entry(self.keys[row].as_py(), shards[row], offsets[row], lengths[row], crcs[row])

    def find(self, key: str) -> int | None:
        row = bisect.bisect_left(_Keys(self.keys), key)
        return row if row < len(self.keys) and self.keys[row].as_py() == key else None


class _Part:
    """One parquet file of an index (the whole index, or one segment): its parsed footer, the blocks'
    row starts and first keys (None where a block has no key statistics)."""

    def __init__(self, parquet: pq.ParquetFile, name: str) -> None:
        metadata = parquet.metadata
        _check_schema(parquet.schema_arrow, name)
        starts, first_keys, at = [], [], 0
        key_field = metadata.schema.names.index("key")
        for number in range(metadata.num_row_groups):
            group = metadata.row_group(number)
            _check_group(group, number, name)
            stats = group.column(key_field).statistics
            starts.append(at)
            first = stats.min if stats is not None and stats.has_min_max else None
            first_keys.append(first if isinstance(first, str) else None)
            at += group.num_rows
        self.parquet, self.starts, self.first_keys, self.rows = parquet, starts, first_keys, at
        self.sorted = all(first is not None for first in first_keys)  # else: searched block by block

    def block_of(self, key: str) -> int:
        """The block that may hold `key` (-1: before the first), when the blocks are `sorted`."""
        return bisect.bisect_right(self.first_keys, key) - 1


class IndexFile:
    """Lookups in one index file, read through `open_file` (a seekable binary file with ranged reads).

    Its footer (a segmented index: the directory, then the footers of the segments a lookup touches,
    `SEGMENT_CACHE` of them kept) is read once; blocks are kept in an LRU of `cache_blocks`.
    Thread-safe: reads of the file are serialized, lookups in cached blocks are not."""

    SEGMENT_CACHE = 64  # parsed segment footers kept: ~0.65 MB each (pyarrow holds ~5 KiB a block)

    def __init__(self, open_file: Callable[[], BinaryIO], cache_blocks: int = 256, name: str | None = None) -> None:
        self._open_file = open_file
        self._cache_blocks = cache_blocks
        self.name = name or str(getattr(open_file, "uri", "the sample index"))  # in every error
        self._lock = threading.Lock()
        self._source: BinaryIO | None = None
        self._segments: list[Segment] = []  # the directory (empty: a plain file, one part)
        self._parts: collections.OrderedDict[int, _Part] = collections.OrderedDict()
        self._part_starts: list[int] = [0]
        self._part_firsts: list[str] = []
        self._rows = 0
        self._blocks: collections.OrderedDict[tuple[int, int], _Block] = collections.OrderedDict()

    def _open(self) -> None:
        with self._lock:
            if self._source is not None:
                return
            source = self._open_file()
            with damage_named(self.name):
                plain, segments = open_segments(source, self.name)
                if plain is not None:
                    part = _Part(plain, self.name)
                    self._parts[0], self._rows = part, part.rows
                else:
                    self._segments = segments
                    self._part_starts = list(itertools.accumulate((s.rows for s in segments[:-1]), initial=0))
                    self._part_firsts = [segment.first_key for segment in segments]
                    self._rows = sum(segment.rows for segment in segments)
            self._source = source

    def _part(self, number: int) -> _Part:
        part = self._parts.get(number)
        if part is not None:
            return part
        with self._lock:
            part = self._parts.get(number)
            if part is None:
                import pyarrow.parquet as pq

                segment = self._segments[number]
                assert self._source is not None
                with damage_named(self.name):
                    parquet = pq.ParquetFile(Window(self._source, segment.offset, segment.bytes))
                    check_segment(parquet, segment, number, self.name)
                    part = _Part(parquet, f"{self.name} (segment {number})")
                self._parts[number] = part
                while len(self._parts) > self.SEGMENT_CACHE:
                    self._parts.popitem(last=False)
        return part

    @property
    def _part_count(self) -> int:
        return len(self._segments) or 1

    def _part_of_key(self, key: str) -> int:
        """The part that may hold `key` (-1: before the first segment)."""
        return bisect.bisect_right(self._part_firsts, key) - 1 if self._segments else 0

    def __len__(self) -> int:
        self._open()
        return self._rows

    def _block(self, part_number: int, number: int) -> _Block:
        at = (part_number, number)
        block = self._blocks.get(at)
        if block is not None:
            self._blocks.move_to_end(at)
            return block
        part = self._part(part_number)
        with self._lock:
            block = self._blocks.get(at)
            if block is None:
                with damage_named(self.name):
                    group = part.parquet.metadata.row_group(number)
                    prefetch = getattr(self._source, "prefetch", None)
                    if prefetch is not None:  # the block's column chunks in one read
                        offset, length = _row_group_range(group)
                        prefetch((self._segments[part_number].offset if self._segments else 0) + offset, length)
                    block = _Block(part.parquet.read_row_group(number), group.num_rows, self.name)
                self._blocks[at] = block
                while len(self._blocks) > self._cache_blocks:
                    self._blocks.popitem(last=False)
        return block

    def at(self, position: int) -> Entry:
        """The entry of the `position`-th sample in key order."""
        rows = len(self)
        if not -rows <= position < rows:
            raise IndexError(f"sample {position} of {rows}")
        position %= rows
        part_number = bisect.bisect_right(self._part_starts, position) - 1
        position -= self._part_starts[part_number]
        part = self._part(part_number)
        number = bisect.bisect_right(part.starts, position) - 1
        return self._block(part_number, number).entry(position - part.starts[number])

    def get(self, key: str) -> Entry | None:
        """The entry of `key`, or None."""
        self._open()
        part_number = self._part_of_key(key)
        if part_number < 0:
            return None
        part = self._part(part_number)
        candidates: Iterable[int] = [part.block_of(key)] if part.sorted else range(len(part.starts))
        for number in candidates:
            if number < 0:
                continue
            block = self._block(part_number, number)
            row = block.find(key)
            if row is not None:
                return block.entry(row)
        return None

    def blocks_from(self, key: str | None) -> Iterator[tuple[str | None, pa.Table]]:
        """The blocks that may hold `key` and every later key, in order, each with its first key
        (the caller stops when it has seen enough)."""
        self._open()
        first_part = 0 if key is None else max(0, self._part_of_key(key))
        for part_number in range(first_part, self._part_count):
            part = self._part(part_number)
            first = 0
            if key is not None and part_number == first_part and part.sorted:
                first = max(0, part.block_of(key))
            for number in range(first, len(part.starts)):
                yield part.first_keys[number], self._block(part_number, number).table

    def rows_matching(self, keys: pa.Array) -> Iterator[pa.Table]:
        """The rows whose key is one of the sorted, unique `keys`, a block at a time, in order: only the
        blocks some key falls in are read (a key's block is the last whose first key is at most it;
        every block when the footer has no key statistics), and each block is matched against the
        keys in its own range alone, so no set of all the keys is built a block (at 10^7 keys that
        would cost ~1 s a block)."""
        self._open()
        parts = _spans(self._part_firsts, keys) if self._segments else [(0, 0, len(keys))]
        for part_number, part_low, part_high in parts:
            part = self._part(part_number)
            in_part = keys.slice(part_low, part_high - part_low)
            spans = list(_spans(part.first_keys, in_part))
            filters = self._filters(part_number, part) if self._segments and len(spans) > 1 else None
            for number, low, high in spans:
                wanted = in_part.slice(low, high - low)
                if filters is not None:  # a block none of whose keys may hold is not read
                    held = key_filter.may_hold(filters[number], wanted)
                    if not held.any():
                        continue
                    wanted = wanted.filter(pa.array(held))
                table = self._block(part_number, number).table
                wanted = wanted.cast(table.schema.field("key").type)
                matched = table.filter(pc.is_in(table.column("key"), value_set=wanted))
                if matched.num_rows:
                    yield matched

    def _filters(self, part_number: int, part: _Part) -> list[bytes]:
        """The key filters of a segment's blocks (one read; read when a lookup's keys fall in more
        than one of its blocks: for one block the block itself is the one read)."""
        rows = [*(b - a for a, b in itertools.pairwise(part.starts)), part.rows - part.starts[-1]]
        with self._lock, damage_named(self.name):
            assert self._source is not None
            return block_filters(self._source, self._segments[part_number], rows, part_number, self.name)

    def blocks_overlapping(self, ranges: Iterable[tuple[str, str]]) -> Iterator[pa.Table]:
        """The blocks that may hold a key between `first` and `last` (inclusive) of any of `ranges`,
        in order, each once (every block when the footer has no key statistics)."""
        self._open()
        ranges = list(ranges)
        for part_number in _overlapping(self._part_firsts, ranges) if self._segments else [0]:
            part = self._part(part_number)
            if self._segments:
                segment = self._segments[part_number]
                mine = [(a, b) for a, b in ranges if a <= segment.last_key and b >= segment.first_key]
            else:
                mine = ranges
            numbers = _overlapping(part.first_keys, mine) if part.sorted else range(len(part.starts))
            for number in numbers:
                yield self._block(part_number, number).table

    def keys(self) -> Iterator[str]:
        """Every key, in order, a block at a time."""
        self._open()
        for part_number in range(self._part_count):
            for number in range(len(self._part(part_number).starts)):
                yield from self._block(part_number, number).keys.to_pylist()

    def __getstate__(self) -> dict:
        return {"open_file": self._open_file, "cache_blocks": self._cache_blocks, "name": self.name}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["open_file"], state["cache_blocks"], state.get("name"))  # type: ignore[misc]


def _spans(firsts: list[str | None] | list[str], keys: pa.Array) -> Iterator[tuple[int, int, int]]:
    """(block, first key, end) of the sorted `keys` falling in each block (of first keys `firsts`) that
    gets any, in order: by bisecting the keys into the blocks' first keys when they are fewer, else
    the blocks' first keys into the keys (log n scalars a block; no Python list of the keys). Every
    block gets every key when some block has no first key."""
    count = len(keys)
    if not count or not firsts:
        return
    if any(first is None for first in firsts):
        yield from ((number, 0, count) for number in range(len(firsts)))
        return
    if count <= len(firsts):
        at = [bisect.bisect_right(firsts, key) - 1 for key in keys.to_pylist()]  # type: ignore[arg-type]
        low = 0
        for high in range(1, count + 1):
            if high == count or at[high] != at[low]:
                if at[low] >= 0:
                    yield at[low], low, high
                low = high
        return
    ordered = _Keys(keys)
    low = bisect.bisect_left(ordered, firsts[0])
    for number in range(len(firsts)):
        high = bisect.bisect_left(ordered, firsts[number + 1], low) if number + 1 < len(firsts) else count
        if high > low:
            yield number, low, high
        low = high


def _overlapping(firsts: list[str | None] | list[str], ranges: list[tuple[str, str]]) -> Iterator[int]:
    """The blocks (of sorted first keys `firsts`) that may hold a key of any of `ranges`, in order, each
    once: from the one holding a range's first key to the last starting at or before its last."""
    spans = sorted((max(0, bisect.bisect_right(firsts, first) - 1), bisect.bisect_right(firsts, last))  # type: ignore[arg-type]
                   for first, last in ranges)  # fmt: skip
    done = 0
    for start, end in spans:
        yield from range(max(start, done), end)
        done = max(done, end)


def _row_group_range(group: pq.RowGroupMetaData) -> tuple[int, int]:
    """(offset, length) of the bytes of a row group's column chunks."""
    starts, ends = [], []
    for number in range(group.num_columns):
        column = group.column(number)
        start = column.data_page_offset
        if column.has_dictionary_page and column.dictionary_page_offset is not None:
            start = min(start, column.dictionary_page_offset)
        starts.append(start)
        ends.append(start + column.total_compressed_size)
    return min(starts), max(ends) - min(starts)


def _name_of(source: BinaryIO | bytes, name: str | None) -> str:
    return name or str(getattr(source, "name", None) or "the sample index")


def read_index(source: BinaryIO | bytes, name: str | None = None) -> pa.Table:
    """The whole index as a table (validation, the reader's key filters, tests); CorruptIndex
    naming `name` (or the stream's) if it does not read as one."""
    name = _name_of(source, name)
    with damage_named(name):
        return pa.concat_tables(parquet.read() for parquet, _, _ in _parquet_parts(source, name))


def index_block_rows(
    source: BinaryIO | bytes, name: str | None = None, check_filters: bool = False
) -> Iterator[pa.RecordBatch]:
    """The index's rows, a block at a time (memory: one block, and one segment's footer); CorruptIndex
    naming `name` (or the stream's) if it does not read as one. `check_filters`: each block's key
    filter must hold each of its keys (what a lookup that skips blocks by them relies on)."""
    name = _name_of(source, name)
    parts = _parquet_parts(source, name, check_filters)
    while True:
        with damage_named(name):
            parquet, part_name, filters = next(parts, (None, name, None))
        if parquet is None:
            return
        for number in range(parquet.num_row_groups):
            with damage_named(name):
                _check_group(parquet.metadata.row_group(number), number, part_name)
                block = parquet.read_row_group(number)
                if filters is not None:
                    check_block_filter(
                        filters[number], block.column("key").combine_chunks(), f"{part_name} block {number}"
                    )
            yield from block.to_batches()


def _parquet_parts(
    source: BinaryIO | bytes, name: str, with_filters: bool = False
) -> Iterator[tuple[pq.ParquetFile, str, list[bytes] | None]]:
    """The parquet files of an index (itself, or its segments in order), each checked as it is
    opened, with the name its errors give and, if asked, its blocks' key filters (pyarrow's errors
    for the caller to name)."""
    import pyarrow.parquet as pq

    stream = io.BytesIO(source) if isinstance(source, bytes) else source
    plain, segments = open_segments(stream, name)
    if plain is not None:
        _check_schema(plain.schema_arrow, name)
        yield plain, name, None
        return
    for number, segment in enumerate(segments):
        parquet = pq.ParquetFile(Window(stream, segment.offset, segment.bytes))
        part_name = f"{name} (segment {number})"
        _check_schema(parquet.schema_arrow, part_name)
        check_segment(parquet, segment, number, name)
        filters = None
        if with_filters:
            rows = [parquet.metadata.row_group(group).num_rows for group in range(parquet.num_row_groups)]
            filters = block_filters(stream, segment, rows, number, name)
        yield parquet, part_name, filters


__all__ = [
    "BLOCK_ROWS",
    "Entry",
    "INDEX_SCHEMA",
    "IndexFile",
    "MERGE_SCHEMA",
    "TASK_SCHEMA",
    "check_entry",
    "concat_rows",
    "damage_named",
    "key_column",
    "named_rows",
    "task_rows",
    "write_index",
    "write_task_run",
]
