"""What both fast paths (`fast_read`, the reader's; `fast_verify`, the validator's) do with a chunk of
a shard: fill it from a stream, and turn the field part of member names into small integers. The
header and name rules themselves are `tar_rules`' and `names`'.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np


def read_full(stream: BinaryIO, view: memoryview) -> int:
    """Fill `view` from `stream` (readinto may return less); the bytes read, fewer only at its end."""
    got = 0
    while got < len(view):
        count = stream.readinto(view[got:])
        if not count:
            break
        got += count
    return got


def field_values(names: np.ndarray, dot: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """(index per row, distinct field names): the text after each row's key dot, as small integers."""
    field_lengths = np.maximum(lengths - dot - 1, 0)
    width = max(int(field_lengths.max(initial=0)), 1)
    take = np.minimum(dot[:, None] + 1 + np.arange(max(width, 8)), names.shape[1] - 1)
    aligned = np.take_along_axis(names, take, axis=1)
    aligned = np.where(np.arange(aligned.shape[1]) < field_lengths[:, None], aligned, np.uint8(0))
    if width <= 8:  # the usual case: one uint64 a field, a pass per distinct field
        values = np.ascontiguousarray(aligned[:, :8]).view(np.uint64).reshape(-1)
        codes = np.empty(len(values), dtype=np.int64)
        distinct: list[bytes] = []
        todo = np.ones(len(values), dtype=bool)
        while todo.any():
            value = values[todo.argmax()]
            same = values == value
            codes[same] = len(distinct)
            distinct.append(value.tobytes().rstrip(b"\0"))
            todo &= ~same
        return codes, distinct
    rows, inverse = np.unique(aligned, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), [row.tobytes().rstrip(b"\0") for row in rows]
