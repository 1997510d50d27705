"""A sample index of more than one segment: parquet files end to end in one object, then a directory.

pyarrow holds a parsed parquet footer at ~5 KiB a row group (360 B of it on storage): one file of a
billion keys in blocks of 8,192 rows would cost every reader ~0.7 GB before its first lookup. So an
index of more than `SEGMENT_BLOCKS` blocks is written as segments, each a whole parquet file of that
many blocks at most (its footer under 64 KiB: one read), one after another in the same object, and a
tail: a parquet file of no rows whose key-value metadata is the directory (each segment's offset,
bytes, rows, first and last key). A reader parses the tail and the footers of the segments it
touches. An index of one segment is a plain parquet file, byte for byte what it was before segments.

The tail's schema is not the index's, so code that knows only plain indexes refuses a segmented one
("not a sample index") rather than reading its tail as an empty index.
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

import pyarrow as pa

from ..errors import CorruptIndex
from . import key_filter

if TYPE_CHECKING:
    import pyarrow.parquet as pq

SEGMENT_BLOCKS = 128  # blocks a segment: 1,048,576 rows of 8,192 a block, a footer of ~46 KiB
DIRECTORY_KIND = "spark-webdataset-sample-index-directory-v1"  # the tail's key-value metadata, "kind"
DIRECTORY_KEY = "segments"  # the tail's key-value metadata: the directory, as JSON
FILTER_KEY = "filter"  # the tail's key-value metadata: the kind of the blocks' key filters
TAIL_SCHEMA = pa.schema([("segmented_sample_index", pa.string())])


@dataclass(frozen=True)
class Segment:
    """One segment as the directory lists it."""

    offset: int
    bytes: int  # of its parquet file
    rows: int
    first_key: str
    last_key: str
    filter_bytes: int  # its blocks' key filters, right after its parquet file (key_filter)

    @property
    def end(self) -> int:
        return self.offset + self.bytes + self.filter_bytes


class Window(io.RawIOBase):
    """Bytes [offset, offset + size) of a seekable binary file, as a file of their own: pyarrow reads a
    segment through it. Reads go to the shared file (callers serialize them)."""

    def __init__(self, source: BinaryIO, offset: int, size: int) -> None:
        self.source, self.offset, self.size = source, offset, size
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def read(self, size: int = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self.position + size)
        if end <= self.position:
            return b""
        self.source.seek(self.offset + self.position)
        data = self.source.read(end - self.position)
        self.position += len(data)
        return data

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)


class _Counted(io.RawIOBase):
    """A sink that counts what is written to it and is never closed by a parquet writer."""

    def __init__(self, sink: BinaryIO) -> None:
        self.sink, self.position = sink, 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        self.sink.write(data)
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def close(self) -> None:  # the parquet writer's close ends a segment, not the object
        pass


class SegmentedWriter:
    """Writes tables of whole blocks (the last may be short) as segments of `segment_rows` rows at most."""

    def __init__(self, sink: BinaryIO, new_writer: Callable[[BinaryIO], pq.ParquetWriter], segment_rows: int) -> None:
        self._sink, self._new_writer, self._segment_rows = _Counted(sink), new_writer, segment_rows
        self._writer: pq.ParquetWriter | None = None
        self._segments: list[Segment] = []
        self._started = self._rows = 0
        self._first = self._last = ""
        self._blocks: list[pa.Array] = []  # the open segment's blocks' keys, in order
        self._pending: list[pa.Array] = []  # the last closed segment's: its filters are built and written
        # only once another segment follows (an index of one segment is a plain file, without filters)

    def write(self, table: pa.Table, row_group_rows: int) -> None:
        while len(table):
            if self._writer is None:
                self._write_filters()  # the last segment's: another follows, so this is no plain file
                self._started, self._rows = self._sink.position, 0  # before the writer puts its magic
                self._writer = self._new_writer(self._sink)
                self._first = table.column("key")[0].as_py()
            part = table.slice(0, self._segment_rows - self._rows)
            self._writer.write_table(part, row_group_size=row_group_rows)
            keys = part.column("key").combine_chunks()
            self._blocks.extend(keys.slice(at, row_group_rows) for at in range(0, len(keys), row_group_rows))
            self._rows += len(part)
            self._last = keys[len(keys) - 1].as_py()
            if self._rows == self._segment_rows:
                self._end_segment()
            table = table.slice(len(part))

    def _end_segment(self) -> None:
        """Close the segment's parquet file; its filters wait until another segment or the tail follows."""
        assert self._writer is not None
        self._writer.close()
        self._writer = None
        self._pending, self._blocks = self._blocks, []
        filter_bytes = sum(key_filter.filter_bytes(len(keys)) for keys in self._pending)
        self._segments.append(
            Segment(
                self._started, self._sink.position - self._started, self._rows, self._first, self._last, filter_bytes
            )
        )

    def _write_filters(self) -> None:
        for keys in self._pending:
            self._sink.write(key_filter.build(keys))
        self._pending = []

    def close(self) -> None:
        """End the last segment; with more than one, write the tail (with none, an empty index). One
        segment is a plain parquet file, without filters (a reader reads its few blocks)."""
        import pyarrow.parquet as pq

        if self._writer is not None:
            self._end_segment()
        if not self._segments:
            self._new_writer(self._sink).close()
        elif len(self._segments) > 1:
            self._write_filters()
            columns = {name: [getattr(s, name) for s in self._segments] for name in Segment.__dataclass_fields__}
            tail = pq.ParquetWriter(self._sink, TAIL_SCHEMA, store_schema=False)
            tail.add_key_value_metadata(
                {"kind": DIRECTORY_KIND, DIRECTORY_KEY: json.dumps(columns), FILTER_KEY: key_filter.KIND}
            )
            tail.close()


def open_segments(source: BinaryIO, name: str) -> tuple[pq.ParquetFile | None, list[Segment]]:
    """(the parquet file, []) for a plain index; (None, its segments) for a segmented one, the
    directory checked against the object's size. Raise pyarrow's errors for the caller to name."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(source)
    metadata = parquet.metadata.metadata or {}
    if metadata.get(b"kind") != DIRECTORY_KIND.encode():
        return parquet, []
    size = source.seek(0, io.SEEK_END)
    tail = len(b"PAR1") + parquet.metadata.serialized_size + 8  # no rows: magic, footer, its length, magic
    kind = metadata.get(FILTER_KEY.encode(), b"").decode(errors="replace")
    if kind != key_filter.KIND:
        raise CorruptIndex(
            f"{name}: its key filters are of kind {kind[:80]!r}, not {key_filter.KIND!r} (the one this version reads)"
        )
    return None, _directory(metadata.get(DIRECTORY_KEY.encode()), size - tail, name)


def _directory(document: bytes | None, tail_at: int, name: str) -> list[Segment]:
    def damaged(rule: str) -> CorruptIndex:
        return CorruptIndex(f"{name}: the directory of its segments {rule}: the index is damaged")

    try:
        columns: Any = json.loads(document or b"null")
        fields = list(Segment.__dataclass_fields__)
        rows = list(zip(*(columns[field] for field in fields), strict=True))
        segments = [Segment(*row) for row in rows]
    except (ValueError, TypeError, KeyError) as error:
        raise damaged(f"does not read ({type(error).__name__})") from None
    at = 0
    for number, segment in enumerate(segments):
        kinds = [type(value) for value in asdict(segment).values()]
        if kinds != [int, int, int, str, str, int]:
            raise damaged(f"lists segment {number} with values of types {[kind.__name__ for kind in kinds]}")
        if (
            segment.offset != at or segment.bytes <= 0 or segment.rows <= 0 or segment.filter_bytes < 0
            or segment.first_key > segment.last_key
        ):  # fmt: skip
            raise damaged(f"lists segment {number} as {asdict(segment)} (it should start at byte {at})")
        if number and segment.first_key < segments[number - 1].last_key:
            raise damaged(f"lists segment {number}'s keys before segment {number - 1}'s")
        at = segment.end
    if len(segments) < 2 or at != tail_at:
        raise damaged(f"lists {len(segments)} segments ending at byte {at}, not where the tail starts ({tail_at})")
    return segments


def block_filters(source: BinaryIO, segment: Segment, block_rows: list[int], number: int, name: str) -> list[bytes]:
    """The key filters of a segment's blocks (of `block_rows` rows each, by its footer), in one read."""
    sizes = [key_filter.filter_bytes(rows) for rows in block_rows]
    if sum(sizes) != segment.filter_bytes:
        raise CorruptIndex(
            f"{name}: segment {number}'s key filters are {segment.filter_bytes} bytes, its {len(sizes)} blocks "
            f"need {sum(sizes)}: the index is damaged"
        )
    source.seek(segment.offset + segment.bytes)
    data = source.read(segment.filter_bytes)
    if len(data) != segment.filter_bytes:
        raise CorruptIndex(f"{name}: segment {number}'s key filters end past the end of the file: the index is damaged")
    starts = [0, *itertools.accumulate(sizes)]
    return [data[start:end] for start, end in zip(starts, starts[1:])]


def check_block_filter(block_filter: bytes, keys: pa.Array, where: str) -> None:
    """A block's filter says yes to each of the block's keys (whoever reads a block whole checks it)."""
    held = key_filter.may_hold(block_filter, keys)
    if not held.all():
        missing = keys[int(held.argmin())].as_py()
        raise CorruptIndex(
            f"{where}: its key filter says key {missing!r} is not in it, but it is: the index is damaged"
        )


def check_segment(parquet: pq.ParquetFile, segment: Segment, number: int, name: str) -> None:
    """A segment's footer agrees with the directory: its rows, and its blocks' first and last keys."""
    metadata = parquet.metadata
    where = f"{name}: segment {number} (byte {segment.offset})"
    if metadata.num_rows != segment.rows or not metadata.num_row_groups:
        raise CorruptIndex(
            f"{where} has {metadata.num_rows} rows, the directory says {segment.rows}: the index is damaged"
        )
    key = parquet.schema_arrow.get_field_index("key")
    first = metadata.row_group(0).column(key).statistics if key >= 0 else None
    last = metadata.row_group(metadata.num_row_groups - 1).column(key).statistics if key >= 0 else None
    found = (
        first.min if first is not None and first.has_min_max else None,
        last.max if last is not None and last.has_min_max else None,
    )
    if found != (segment.first_key, segment.last_key):
        raise CorruptIndex(
            f"{where} holds keys {found[0]!r} .. {found[1]!r}, the directory says {segment.first_key!r} .. "
            f"{segment.last_key!r}: the index is damaged"
        )


__all__ = [
    "SEGMENT_BLOCKS", "Segment", "SegmentedWriter", "Window", "block_filters", "check_block_filter", "check_segment",
    "open_segments",
]  # fmt: skip
