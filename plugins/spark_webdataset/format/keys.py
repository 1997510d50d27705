"""Proving keys unique across a dataset without holding them all in one place.

Each writer sorts the keys it wrote into a run; runs are merged as sorted
streams, so memory is one block per run, whatever the dataset's size.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from .names import WebDatasetError


class KeyRun:
    """Collects one writer's keys and sorts them into a duplicate-free run."""

    def __init__(self) -> None:
        self._chunks: list[pa.Array] = []

    def add(self, keys: pa.Array) -> None:
        self._chunks.append(keys.cast(pa.large_string()))

    def sorted(self) -> pa.Array:
        """The keys in sorted order; raises if one key was given twice."""
        if not self._chunks:
            return pa.array([], pa.large_string())
        keys = pa.concat_arrays(self._chunks)
        self._chunks = [keys]
        ordered = keys.take(pc.sort_indices(keys))
        if len(ordered) > 1:
            same = pc.equal(ordered[1:], ordered[:-1])
            if pc.any(same).as_py():
                key = ordered[pc.index(same, True).as_py()].as_py()
                raise WebDatasetError(f"duplicate sample key {key!r}: a key may appear only once in a dataset")
        return ordered


def first_duplicate(runs: Iterable[Iterable[str]]) -> tuple[str, int, int] | None:
    """(key, run, other run) for the smallest key found in two sorted runs, or None."""
    tagged = [_tag(run, number) for number, run in enumerate(runs)]
    previous: tuple[str, int] | None = None
    for key, number in heapq.merge(*tagged):
        if previous is not None and key == previous[0]:
            return key, previous[1], number
        previous = (key, number)
    return None


def _tag(run: Iterable[str], number: int) -> Iterator[tuple[str, int]]:
    for key in run:
        yield key, number


def iterate_blocks(blocks: Iterable[pa.Array]) -> Iterator[str]:
    for block in blocks:
        yield from block.to_pylist()
