"""The next sample index of a commit: the sorted index runs of its tasks and of what it builds
on (every layer of the base's index, its live rows), merged to prove keys unique (a key in two runs
fails the commit, naming both); the runs the new version stores (its own rows, the layers it folds)
are staged as its own index file."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import DuplicateKey
from ..format.keys import first_duplicate_in_blocks, merge_blocks
from .index_layers import IndexPart, live_rows, part_rows
from .layout import Version

# Runs merged at once: the merge holds one block and an open stream a run; past this many, runs are
# merged in groups through local scratch files (bench/scale.py: a commit of 3,600 tasks held ~25 GB
# of first blocks, one of 100k tasks ran out of file descriptors).
MERGE_FAN_IN = 64
MERGE_BLOCK_ROWS = 8192  # a scratch file's blocks: 64 of them are ~55 MB of index rows
_RUN = "run"  # the column that carries a row's run through a merge in groups


def task_keys(version: Version, path: str) -> pa.Array:
    """A task's keys, from its index rows."""
    import pyarrow as pa

    with version.storage.open_read(path) as stream:
        table = pa.ipc.open_stream(stream).read_all()
    return table.column(0).combine_chunks()


def task_index_rows(version: Version, path: str, names: list[str]) -> Iterator[pa.RecordBatch]:
    """A task's sorted index rows, its shard numbers turned into the shards' final names."""
    import pyarrow as pa

    from ..format.sample_index import MERGE_SCHEMA, named_rows

    shard_names = pa.array(names, pa.string())
    with version.storage.open_read(path) as stream:
        for batch in pa.ipc.open_stream(stream):
            yield named_rows(batch, shard_names).cast(MERGE_SCHEMA)


def base_part_rows(part: IndexPart, listed: frozenset[str]) -> Iterator[pa.RecordBatch]:
    """The live rows of one file of the base's index as the new version names and lists them
    (`listed`: its shard locations), sorted by key (format.sample_index.MERGE_SCHEMA)."""
    from ..format.sample_index import MERGE_SCHEMA

    for batch in live_rows(part, listed, part_rows(part)):
        yield batch.cast(MERGE_SCHEMA)


def layer_rows_near(part: IndexPart, listed: frozenset[str], keys: pa.Array) -> Iterator[pa.RecordBatch]:
    """The live rows of one file whose key is one of the sorted, unique `keys` (MERGE_SCHEMA): what a
    layer the new version keeps must be merged with to prove the new keys absent from it, at the
    cost of the blocks the keys fall in, not of the layer (IndexFile.rows_matching). The keys are
    matched before the live rule, which then looks at the matches alone."""
    from ..format.sample_index import MERGE_SCHEMA, IndexFile

    matches = IndexFile(part, cache_blocks=1, name=part.uri).rows_matching(keys)
    for batch in live_rows(part, listed, matches):
        yield batch.cast(MERGE_SCHEMA)


@dataclass(frozen=True)
class BaseIndex:
    """The live index rows of the version a change builds on, read by what may hold given keys: a
    change plan reads the blocks its keys fall in and the blocks of the shards it rewrites, not every
    layer (format.sample_index.MERGE_SCHEMA, sorted within each file, not across)."""

    parts: list[IndexPart]
    listed: frozenset[str]  # the base's shard locations (the live rule)

    def rows_holding(self, keys: pa.Array) -> Iterator[pa.RecordBatch]:
        """The live rows whose key is one of the sorted, unique `keys`."""
        for part in self.parts:
            yield from layer_rows_near(part, self.listed, keys)

    def rows_between(self, ranges: list[tuple[str, str]] | None) -> Iterator[pa.RecordBatch]:
        """Live rows of every block that may hold a key of one of the (first, last) `ranges` (None: every row)."""
        from ..format.sample_index import MERGE_SCHEMA, IndexFile

        for part in self.parts:
            if ranges is None:
                yield from base_part_rows(part, self.listed)
                continue
            blocks = IndexFile(part, cache_blocks=1, name=part.uri).blocks_overlapping(ranges)
            for batch in live_rows(part, self.listed, blocks):
                yield batch.cast(MERGE_SCHEMA)


def merge_index(
    version: Version,
    runs: list[Iterator[pa.RecordBatch]],
    owners: list[str],
    staged: str,
    written: set[int] | None = None,
) -> tuple[int, int]:
    """Merge the sorted `runs` (`owners[i]` names run i in an error), raising DuplicateKey on a key in
    two runs, and stage the rows of the runs in `written` (all if None) as one index at `staged`:
    the other runs are layers the new version reads through, merged only to prove its keys unique.
    (its size in bytes, its rows)"""
    from ..format.sample_index import write_index

    keep = None if written is None or len(written) == len(runs) else np.array(sorted(written), dtype=np.int64)

    def merged(scratch: str) -> Iterator[pa.RecordBatch]:
        runs_of_block: list[np.ndarray] = []  # the run of each row of the block in hand

        def tagged() -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
            for block, runs_of in merge_in_groups(runs, scratch, version.storage.concurrent_requests):
                runs_of_block[:] = [runs_of]
                yield block, runs_of

        for rows, found in first_duplicate_in_blocks(tagged()):
            if found:
                key, first, second = found
                raise DuplicateKey(
                    f"duplicate sample key {key!r} in {owners[first]} and {owners[second]} of {version.uri}: "
                    "a key may appear only once in a version"
                )
            if keep is not None:
                rows = rows.filter(pa.array(np.isin(runs_of_block[0], keep)))
            yield rows

    with tempfile.TemporaryDirectory(prefix="webdataset-index-") as scratch:
        local = os.path.join(scratch, "index.parquet")
        count = write_index(merged(scratch), local)
        with open(local, "rb") as source, version.storage.open_write(staged) as target:
            shutil.copyfileobj(source, target, 8 << 20)
        return os.path.getsize(local), count


def merge_in_groups(
    runs: list[Iterator[pa.RecordBatch]], scratch: str, threads: int, fan_in: int = MERGE_FAN_IN
) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
    """format.keys.merge_blocks over `runs` (the same blocks' rows, each with its run's number) with
    at most `fan_in` runs open at once: more runs are first merged `fan_in` at a time into files in
    `scratch`, each row carrying its run's number, then those files are merged in turn."""
    if len(runs) <= fan_in:
        yield from merge_blocks(_started_together(runs, threads))
        return
    sources = [_with_run(run, number) for number, run in enumerate(runs)]
    level = 0
    while len(sources) > fan_in:
        merged_files = []
        for start in range(0, len(sources), fan_in):
            path = os.path.join(scratch, f"merge-{level}-{start // fan_in}.arrow")
            _write_run(merge_blocks(_started_together(sources[start : start + fan_in], threads)), path)
            merged_files.append(path)
        sources = [_read_run(path) for path in merged_files]
        level += 1
    for block, _ in merge_blocks(_started_together(sources, threads)):
        yield block.select(range(block.num_columns - 1)), block.column(_RUN).to_numpy()


def _with_run(run: Iterator[pa.RecordBatch], number: int) -> Iterator[pa.RecordBatch]:
    for block in run:
        yield block.append_column(_RUN, pa.array(np.full(len(block), number, np.int64)))


def _write_run(blocks: Iterator[tuple[pa.RecordBatch, np.ndarray]], path: str) -> None:
    """Merged blocks to a scratch file in batches of MERGE_BLOCK_ROWS rows (the last fewer): a merged
    block can hold a block of every run it took from (the next level keeps one batch a file in
    memory), or a single row (tiny tasks over disjoint ranges, where a batch each cost ~0.1 ms to
    write and read back: 15x the merge)."""
    with contextlib.ExitStack() as open_files:
        writer = None
        pending: list[pa.RecordBatch] = []
        held = 0

        def write(final: bool) -> None:
            nonlocal writer, pending, held
            if not held or (held < MERGE_BLOCK_ROWS and not final):
                return
            if writer is None:
                sink = open_files.enter_context(pa.OSFile(path, "wb"))
                options = pa.ipc.IpcWriteOptions(compression="lz4")
                writer = open_files.enter_context(pa.ipc.new_stream(sink, pending[0].schema, options=options))
            table = pa.Table.from_batches(pending).combine_chunks()
            whole = held if final else held - held % MERGE_BLOCK_ROWS
            writer.write_table(table.slice(0, whole), max_chunksize=MERGE_BLOCK_ROWS)
            pending, held = table.slice(whole).to_batches(), held - whole

        for block, _ in blocks:
            if len(block):
                pending.append(block)
                held += len(block)
                write(final=False)
        write(final=True)


def _read_run(path: str) -> Iterator[pa.RecordBatch]:
    if not os.path.exists(path):  # every run of the group was empty
        return
    with pa.OSFile(path, "rb") as source:
        yield from pa.ipc.open_stream(source)


def _started_together(runs: list[Iterator[pa.RecordBatch]], threads: int) -> list[Iterator[pa.RecordBatch]]:
    """Each run opened and its first block read, `threads` at a time: the merge needs every
    run's first block before its first round, and on gs:// each costs round trips (memory is
    the same: one block per run)."""
    if threads <= 1 or len(runs) <= 1:
        return runs

    def start(run: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = next(run, None)
        return iter(()) if first is None else itertools.chain([first], run)

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="webdataset-keys") as pool:
        return list(pool.map(start, runs))
