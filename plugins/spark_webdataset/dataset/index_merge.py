"""The next sample index of a commit: the sorted index runs of its tasks and of what it builds
on, merged into one and staged; a key in two runs fails the commit, naming both."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..errors import DuplicateKey
from ..format.keys import first_duplicate_in_blocks, merge_blocks
from .layout import Version

if TYPE_CHECKING:
    import pyarrow as pa


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


def version_index_rows(version: Version, path: str, parent: str | None = None) -> Iterator[pa.RecordBatch]:
    """A version's index rows; read from a `parent`, its own shards' locations become references."""
    import pyarrow.compute as pc

    from ..format.sample_index import MERGE_SCHEMA, index_block_rows

    with version.storage.open_read(path) as stream:
        for batch in index_block_rows(stream):
            batch = batch.cast(MERGE_SCHEMA)
            if parent is not None:
                shards = batch.column(1)
                own = pc.invert(pc.starts_with(shards, "../"))
                referenced = pc.if_else(own, pc.binary_join_element_wise(f"../{parent}/", shards, ""), shards)
                batch = batch.set_column(1, "shard", referenced)
            yield batch


def merge_index(version: Version, runs: list[Iterator[pa.RecordBatch]], owners: list[str], staged: str) -> int:
    """Merge the sorted `runs` (`owners[i]` names run i in an error) into one index staged at
    `staged`; raise DuplicateKey on a key in two runs. Its size in bytes."""
    from ..format.sample_index import write_index

    def merged() -> Iterator[pa.RecordBatch]:
        started = _started_together(runs, version.storage.concurrent_requests)
        for rows, found in first_duplicate_in_blocks(merge_blocks(started)):
            if found:
                key, first, second = found
                raise DuplicateKey(
                    f"duplicate sample key {key!r} in {owners[first]} and {owners[second]} of {version.uri}: "
                    "a key may appear only once in a version"
                )
            yield rows

    with tempfile.TemporaryDirectory(prefix="webdataset-index-") as scratch:
        local = os.path.join(scratch, "index.parquet")
        write_index(merged(), local)
        with open(local, "rb") as source, version.storage.open_write(staged) as target:
            shutil.copyfileobj(source, target, 8 << 20)
        return os.path.getsize(local)


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
