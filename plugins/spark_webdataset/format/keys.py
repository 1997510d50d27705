"""Proving keys unique across a dataset without holding them all in one place.

Each writer sorts the keys it wrote into a run; runs are merged as sorted
streams, so memory is one block per run, whatever the dataset's size. A
run's blocks are key arrays, or record batches whose first column is the
key (the sample index's rows: the merge carries the other columns along).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import DuplicateKey

Block = pa.Array | pa.RecordBatch


def key_column(block: Block) -> pa.Array:
    """The keys of a block: the array itself, or a record batch's first column."""
    return block.column(0) if isinstance(block, pa.RecordBatch) else block


def sort_run(rows: pa.RecordBatch) -> tuple[pa.RecordBatch, bool]:
    """One writer's rows (key first) sorted by key, and whether they came in strictly ascending
    key order (then every shard written from them holds exactly the keys between its first and
    last, and readers may skip shards whose range cannot match a key filter); raises if one key
    was given twice."""
    keys = key_column(rows)
    arrived_sorted = len(keys) < 2 or bool(pc.all(pc.greater(keys[1:], keys[:-1])).as_py())
    if arrived_sorted:
        return rows, True  # strictly ascending: no key repeats
    ordered = rows.take(pc.sort_indices(keys))
    same = pc.equal(ordered.column(0)[1:], ordered.column(0)[:-1])
    if pc.any(same).as_py():
        key = ordered.column(0)[pc.index(same, True).as_py()].as_py()
        raise DuplicateKey(f"duplicate sample key {key!r}: a key may appear only once in a dataset")
    return ordered, False


def merge_blocks(runs: Iterable[Iterable[Block]]) -> Iterator[tuple[Block, np.ndarray]]:
    """Merge runs of sorted Arrow blocks into sorted blocks, each with the run number of every key.

    Each round takes from every run the keys up to the smallest of the runs'
    current block maxima (no later key of any run can sort before them) and
    sorts them together (stable, so run order breaks ties): Arrow's kernels
    instead of a heap step per key, and one block per run in memory. Two heaps
    (block maxima, block minima) find the bound and the runs that have keys at
    or below it, so a round costs only the runs it takes from: thousands of
    small runs over disjoint ranges (one per task) merge in linear time, not
    quadratic; a round that takes from one run alone needs no sort.
    """
    iterators = [iter(run) for run in runs]
    heads: list[Block | None] = [None] * len(iterators)
    by_last: list[tuple[str, int]] = []  # (block maximum, run): one entry per run with a head
    by_first: list[tuple[str, int]] = []  # (head's first key, run): one entry per run with a head

    def advance(number: int) -> None:
        head = _next_block(iterators[number])
        heads[number] = head
        if head is not None:
            keys = key_column(head)
            heapq.heappush(by_last, (keys[len(keys) - 1].as_py(), number))
            heapq.heappush(by_first, (keys[0].as_py(), number))

    for number in range(len(iterators)):
        advance(number)
    while by_last:
        bound = by_last[0][0]
        while by_last and by_last[0][0] == bound:
            heapq.heappop(by_last)  # these heads end at the bound: taken whole below
        taking = []
        while by_first and by_first[0][0] <= bound:
            taking.append(heapq.heappop(by_first)[1])
        taking.sort()  # run order, so the stable sort breaks ties by run
        parts, owners = [], []
        for number in taking:
            head = heads[number]
            assert head is not None
            keys = key_column(head)
            whole = keys[len(keys) - 1].as_py() <= bound
            cut = len(head) if whole else int(pc.sum(pc.less_equal(keys, bound)).as_py() or 0)
            parts.append(head.slice(0, cut))
            owners.append(np.full(cut, number, dtype=np.int64))
            if whole:
                advance(number)
            else:
                heads[number] = rest = head.slice(cut)
                heapq.heappush(by_first, (key_column(rest)[0].as_py(), number))
        if len(parts) == 1:
            yield parts[0], owners[0]
            continue
        merged = pa.concat_batches(parts) if isinstance(parts[0], pa.RecordBatch) else pa.concat_arrays(parts)
        order = pc.sort_indices(key_column(merged))
        yield merged.take(order), np.concatenate(owners)[order.to_numpy()]


def first_duplicate_in_blocks(
    blocks: Iterable[tuple[Block, np.ndarray]],
) -> Iterator[tuple[Block, tuple[str, int, int] | None]]:
    """Pass merged blocks through; with each, the first key found twice so far (key, run, other run)."""
    previous: tuple[str, int] | None = None
    for block, runs_of in blocks:
        keys = key_column(block)
        found = None
        if previous is not None and keys[0].as_py() == previous[0]:
            found = (previous[0], previous[1], int(runs_of[0]))
        elif len(keys) > 1:
            same = pc.equal(keys.slice(1), keys.slice(0, len(keys) - 1))
            if pc.any(same).as_py():
                at = pc.index(same, True).as_py()
                found = (keys[at].as_py(), int(runs_of[at]), int(runs_of[at + 1]))
        yield block, found
        if found:
            return
        previous = (keys[len(keys) - 1].as_py(), int(runs_of[-1]))


def count_duplicates(blocks: Iterable[tuple[Block, np.ndarray]], listed: int) -> tuple[int, list[tuple[str, int, int]]]:
    """Every key that repeats one before it in merged blocks: the count, and the first `listed` (key, run, run)."""
    count = 0
    found: list[tuple[str, int, int]] = []
    previous: tuple[str, int] | None = None
    for block, runs_of in blocks:
        keys = key_column(block)
        if previous is not None and keys[0].as_py() == previous[0]:
            count += 1
            if len(found) < listed:
                found.append((previous[0], previous[1], int(runs_of[0])))
        if len(keys) > 1:
            same = pc.equal(keys.slice(1), keys.slice(0, len(keys) - 1))
            repeats = int(pc.sum(same).as_py() or 0)
            if repeats:
                count += repeats
                for at in np.flatnonzero(same.to_numpy(zero_copy_only=False))[: max(0, listed - len(found))]:
                    found.append((keys[int(at)].as_py(), int(runs_of[at]), int(runs_of[at + 1])))
        previous = (keys[len(keys) - 1].as_py(), int(runs_of[-1]))
    return count, found


def _next_block(blocks: Iterator[Block]) -> Block | None:
    for block in blocks:
        if len(block):
            return block
    return None
