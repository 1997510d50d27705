"""A version's sample index as layers: its own file over its ancestors' (`sample_index_layers`).

A child version's own index file holds the rows of what it wrote (and of the ancestor layers it
folded); the rest it reads through the files of the ancestors that store them, so a 1 % change writes
1 % of the index. The live rule (no tombstones): a row of a layer is live in version V iff its shard,
as V sees it (`../<layer's version>/<name>` for a row naming a shard of the layer's own version; a
row that says `../X/…` already stays as it is), is a shard V's manifest lists. Exact because
copy-on-write rewrites every shard holding a replaced or deleted key (its old rows then name a shard V
no longer lists), every file's rows are live in the version that stores it (a commit writes and folds
live rows only), and each row lives in one file of a chain: every key of a listed shard is live in
exactly one layer, and key uniqueness is uniqueness among live rows.

A lookup reads V's own file, then each layer in order: the first live row wins (at most 1 + the
layers' count block reads). Key order (`keys()`, `blocks_from`, positional `at`) merges the live rows
of all layers (format/keys.merge_blocks). A commit bounds the depth: `fold_count` (LSM-style, tiered).
Versions without layers keep reading their one whole file as before (random_access.index_file).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptManifest, InputError
from ..format.keys import merge_blocks
from ..format.manifest import IndexLayer, Manifest
from ..format.sample_index import INDEX_SCHEMA, Entry, IndexFile
from ..storage import storage_for
from ..storage.base import RangeFile
from .paths import check_version_id
from .tree import sample_index_path, sample_index_serial

if TYPE_CHECKING:
    from .layout import Version

# A version reads its own index file and at most MAX_INDEX_LAYERS - 1 ancestor layers: a commit folds
# the nearest layers into its own file when there would be more (and when they are small, see fold_count).
MAX_INDEX_LAYERS = 8
_SEGMENT_CACHE = 16  # positional segments (merged live rows between two fences) kept by `at`


@dataclass(frozen=True)
class IndexPart:
    """One file a version's index reads: where it is, its size, and the version that stores it when
    that is not the reading version (None: the reader's own file, its rows' shards as they are)."""

    uri: str
    bytes: int
    stored_in: str | None
    rows: int | None = None  # as its layer entry records it (None: the reader's own file)

    def __call__(self) -> RangeFile:  # opens the file: an IndexFile's picklable opener
        return RangeFile(storage_for(self.uri), self.uri, self.bytes)

    def seen(self, batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
        """`batch` (INDEX_SCHEMA's columns) with its shards as the reading version names them."""
        batch = _as_batch(batch)
        if self.stored_in is None or not len(batch):
            return batch
        shards = batch.column(1)
        own = pc.invert(pc.starts_with(shards, "../"))
        seen = pc.if_else(own, pc.binary_join_element_wise(f"../{self.stored_in}/", shards, ""), shards)
        return batch.set_column(1, "shard", seen)


def check_layer(layer: IndexLayer, manifest_uri: str) -> IndexLayer:
    """`layer` if its version id and path are ones the layout allows; CorruptManifest naming the file if not."""
    try:
        check_version_id(layer.version)
        known = sample_index_path(sample_index_serial(layer.path)) == layer.path
    except (InputError, ValueError) as error:
        raise CorruptManifest(f"{manifest_uri}: sample index layer {layer.to_dict()!r}: {error}") from None
    if not known:
        raise CorruptManifest(
            f"{manifest_uri}: sample index layer path {layer.path!r} is not a path the writer gives "
            f"({sample_index_path(0)}, ...)"
        )
    return layer


def layer_parts(version: Version, layers: Iterable[IndexLayer]) -> list[IndexPart]:
    """The files of `layers` (ancestors of `version`, which must be in a dataset root), checked by the layout."""
    layers = [check_layer(layer, version.manifest_uri) for layer in layers]
    if layers and version.dataset is None:
        raise CorruptManifest(
            f"{version.manifest_uri}: reads index layers of other versions but is not in a dataset root"
        )
    return [
        IndexPart(version.dataset.version(layer.version).path(layer.path), layer.bytes, layer.version, layer.rows)
        for layer in layers
        if version.dataset is not None
    ]


def index_parts(version: Version, manifest: Manifest, stored_in: str | None = None) -> list[IndexPart]:
    """The files `manifest`'s index reads, own file first (`manifest.sample_index` must be set).
    `stored_in`: the id of the version that holds the manifest when it is read as a parent's (its own
    rows' shards are then references), else None."""
    assert manifest.sample_index is not None and manifest.sample_index_bytes is not None
    holder = version if stored_in is None else version.dataset.version(stored_in)  # type: ignore[union-attr]
    own = IndexPart(holder.path(manifest.sample_index), manifest.sample_index_bytes, stored_in)
    return [own, *layer_parts(holder, manifest.sample_index_layers)]


def index_file_names(holder: str, manifest: Manifest) -> list[tuple[str, str]]:
    """(version that stores it, path in that version) of each file `manifest`'s index reads, in
    index_parts' order (own file first); `holder` is the version that stores the manifest."""
    assert manifest.sample_index is not None
    return [(holder, manifest.sample_index), *((layer.version, layer.path) for layer in manifest.sample_index_layers)]


def live_rows(
    part: IndexPart, listed: frozenset[str], blocks: Iterable[pa.RecordBatch | pa.Table]
) -> Iterator[pa.RecordBatch]:
    """The live rows of `blocks` (read from `part`): their shards as the reader names them, only
    those of a shard in `listed` (the reading version's shard locations)."""
    for block in blocks:
        batch = rows_in_shards(part.seen(block), listed)
        if len(batch):
            yield batch


def rows_in_shards(batch: pa.RecordBatch, shards: frozenset[str]) -> pa.RecordBatch:
    """The rows of `batch` (shard in column 1) whose shard is in `shards`. The block's distinct shards
    are looked up in the set, and only a block naming another shard is filtered: Arrow's is_in would
    hash the whole set again for each block (at 100k shards, ~16 ms a block of 8,192 rows against ~3)."""
    if not len(batch):
        return batch
    present = pc.unique(batch.column(1)).to_pylist()
    mine = [shard for shard in present if shard in shards]
    if len(mine) == len(present):
        return batch
    return batch.filter(pc.is_in(batch.column(1), value_set=pa.array(mine, batch.schema.field(1).type)))


def part_rows(part: IndexPart, name: str | None = None, check_filters: bool = False) -> Iterator[pa.RecordBatch]:
    """Every row of one file, a block at a time, as read (CorruptIndex naming it if damaged; with
    `check_filters`, also if a block's key filter says no to one of its keys)."""
    from ..format.sample_index import index_block_rows

    with storage_for(part.uri).open_read(part.uri) as stream:
        yield from index_block_rows(stream, name or part.uri, check_filters)


def file_rows(part: IndexPart) -> int:
    """How many rows a file holds, by its footer or its segments' directory: a layer entry records it."""
    return len(IndexFile(part, name=part.uri))


def locations(manifest: Manifest) -> frozenset[str]:
    """The shard locations a manifest lists, as the live rule compares them."""
    return frozenset(shard.location for shard in manifest.shards)


def merged_live_rows(
    parts: list[IndexPart], listed: frozenset[str], check_filters: bool = False
) -> Iterator[pa.RecordBatch]:
    """Every live row of `parts`, in key order (memory: one block per part)."""
    for batch, _ in merge_blocks(
        live_rows(part, listed, part_rows(part, check_filters=check_filters)) for part in parts
    ):
        yield batch


def fold_count(own_rows: int, layers: list[IndexLayer]) -> int:
    """How many of the nearest `layers` a commit folds into its own file (of `own_rows` rows): while
    the version would read more than MAX_INDEX_LAYERS files, or the next layer holds fewer than twice
    the rows merged so far (tiered: the large base layer is rarely rewritten, so a row is rewritten
    O(log n) times)."""
    folded, merged = 0, own_rows
    while folded < len(layers) and (
        1 + len(layers) - folded > MAX_INDEX_LAYERS or layers[folded].rows < 2 * max(merged, 1)
    ):
        merged += layers[folded].rows
        folded += 1
    return folded


class LayeredIndex:
    """A layered version's index with IndexFile's interface (get, at, keys, blocks_from, len, name);
    every entry it returns names its shard as the version does. Pickles to its files and locations."""

    def __init__(self, parts: list[IndexPart], listed: list[str], cache_blocks: int, name: str) -> None:
        self._parts, self._cache_blocks, self.name = parts, cache_blocks, name
        self._listed = frozenset(listed)
        self._files = [IndexFile(part, cache_blocks, name=part.uri) for part in parts]
        self._lock = threading.Lock()
        self._starts: list[int] | None = None  # positions of the fences (`at`)
        self._fence_keys: list[str] = []
        self._rows = 0
        self._segments: collections.OrderedDict[int, pa.RecordBatch] = collections.OrderedDict()

    def get(self, key: str) -> Entry | None:
        """The entry of `key`: the first live row of the own file, then each layer in order."""
        for part, file in zip(self._parts, self._files):
            entry = file.get(key)
            if entry is None:
                continue
            shard = (
                entry.shard
                if part.stored_in is None or entry.shard.startswith("../")
                else f"../{part.stored_in}/{entry.shard}"
            )
            if shard in self._listed:
                return dataclasses.replace(entry, shard=shard)
        return None

    def _merged(self, key: str | None) -> Iterator[pa.RecordBatch]:
        """Live rows from the blocks that may hold `key` on, merged in key order (earlier keys may come first)."""
        runs = [
            live_rows(part, self._listed, (table for _, table in file.blocks_from(key)))
            for part, file in zip(self._parts, self._files)
        ]
        for batch, _ in merge_blocks(runs):
            yield batch

    def blocks_from(self, key: str | None) -> Iterator[tuple[str | None, pa.Table]]:
        """Merged blocks of live rows that may hold `key` and every later key, in order, each with its first key."""
        for batch in self._merged(key):
            yield batch.column(0)[0].as_py(), pa.Table.from_batches([batch])

    def keys(self) -> Iterator[str]:
        """Every live key, in order."""
        for batch in self._merged(None):
            yield from batch.column(0).to_pylist()

    def _fences(self) -> list[int]:
        """On first use, one pass over every live row: where each merged block starts (its position and
        first key), so `at` finds a position's segment by bisection and reads from its fence key on."""
        with self._lock:
            if self._starts is None:
                starts, keys, at = [], [], 0
                for batch in self._merged(None):
                    starts.append(at)
                    keys.append(batch.column(0)[0].as_py())
                    at += len(batch)
                self._fence_keys, self._rows, self._starts = keys, at, starts
            return self._starts

    def __len__(self) -> int:
        self._fences()
        return self._rows

    def _segment(self, number: int) -> pa.RecordBatch:
        """The live rows from fence `number` to the next (or the end)."""
        segment = self._segments.get(number)
        if segment is not None:
            return segment
        starts = self._fences()
        end = starts[number + 1] if number + 1 < len(starts) else self._rows
        wanted, first = end - starts[number], self._fence_keys[number]
        pieces, have = [], 0
        for batch in self._merged(first):
            batch = batch.filter(pc.greater_equal(batch.column(0), first))
            pieces.append(batch.slice(0, wanted - have))
            have += len(pieces[-1])
            if have >= wanted:
                break
        segment = pa.concat_batches(pieces) if pieces else _as_batch(INDEX_SCHEMA.empty_table())
        self._segments[number] = segment
        while len(self._segments) > _SEGMENT_CACHE:
            self._segments.popitem(last=False)
        return segment

    def at(self, position: int) -> Entry:
        """The entry of the `position`-th live sample in key order (the first call reads every layer once)."""
        rows = len(self)
        if not -rows <= position < rows:
            raise IndexError(f"sample {position} of {rows}")
        position %= rows
        starts = self._fences()
        number = bisect.bisect_right(starts, position) - 1
        segment = self._segment(number)
        row = position - starts[number]
        if row >= len(segment):
            raise IndexError(f"sample {position} of {rows}: the index layers changed while read")
        return Entry(*(segment.column(column)[row].as_py() for column in range(5)))

    def __getstate__(self) -> dict:
        return {
            "parts": self._parts,
            "listed": sorted(self._listed),
            "cache_blocks": self._cache_blocks,
            "name": self.name,
        }

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["parts"], state["listed"], state["cache_blocks"], state["name"])  # type: ignore[misc]


def _as_batch(block: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    """A block as one record batch of INDEX_SCHEMA (a string key, as every file writes it)."""
    if isinstance(block, pa.Table):
        batches = block.to_batches()
        block = pa.concat_batches(batches) if batches else pa.RecordBatch.from_pylist([], schema=block.schema)
    names = INDEX_SCHEMA.names
    if block.schema.names != names:
        block = block.select(names)
    return block.cast(INDEX_SCHEMA) if block.schema != INDEX_SCHEMA else block
