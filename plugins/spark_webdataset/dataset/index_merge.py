"""The next sample index of a commit: the sorted index runs of its tasks and of what it builds
on (every layer of the base's index, its live rows), merged to prove keys unique (a key in two runs
fails the commit, naming both); the runs the new version stores (its own rows, the layers it folds)
are staged as its own index file."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from ..errors import DuplicateKey
from ..format.keys import first_duplicate_in_blocks, merge_blocks
from .index_layers import IndexPart, live_rows, part_rows
from .layout import Version


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


def base_part_rows(part: IndexPart, listed: pa.Array) -> Iterator[pa.RecordBatch]:
    """The live rows of one file of the base's index as the new version names and lists them
    (`listed`: its shard locations), sorted by key (format.sample_index.MERGE_SCHEMA)."""
    from ..format.sample_index import MERGE_SCHEMA

    for batch in live_rows(part, listed, part_rows(part)):
        yield batch.cast(MERGE_SCHEMA)


def layer_rows_near(part: IndexPart, listed: pa.Array, keys: pa.Array) -> Iterator[pa.RecordBatch]:
    """The live rows of the blocks of one file that may hold any of the sorted `keys` (MERGE_SCHEMA):
    what a layer the new version keeps must be merged with to prove the new keys absent from it,
    at the cost of the blocks the new keys fall in, not of the layer."""
    from ..format.sample_index import MERGE_SCHEMA, IndexFile

    if not len(keys):
        return
    blocks = IndexFile(part, cache_blocks=1, name=part.uri).blocks_holding(keys)
    for batch in live_rows(part, listed, blocks):
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

    def merged() -> Iterator[pa.RecordBatch]:
        started = _started_together(runs, version.storage.concurrent_requests)
        runs_of_block: list[np.ndarray] = []  # the run of each row of the block in hand

        def tagged() -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
            for block, runs_of in merge_blocks(started):
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
        count = write_index(merged(), local)
        with open(local, "rb") as source, version.storage.open_write(staged) as target:
            shutil.copyfileobj(source, target, 8 << 20)
        return os.path.getsize(local), count


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
