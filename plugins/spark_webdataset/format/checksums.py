"""Shard checksums: crc32c (Castagnoli) as GCS reports it, and sha256.

The writer computes crc32c while writing (~13 GB/s a core with SSE4.2,
against ~2 GB/s for sha256); on gs:// the commit compares it with the
object's own server-side crc32c. Validation, which reads every byte
anyway, computes both. `google_crc32c` is a standalone C extension
(no GCS client), so the format core may use it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import threading
from collections.abc import Iterable
from itertools import accumulate
from typing import BinaryIO

import numpy as np
from google_crc32c import extend as _extend

CRC32C = "crc32c"
SHA256 = "sha256"
CHECKSUMS = (CRC32C, SHA256)  # values of the writer's `checksum` option; crc32c is the default


def crc32c_extend(crc: int, data) -> int:
    """`crc` extended by `data`: bytes or a contiguous numpy array, read in place.

    The C extension takes only buffers that need no release (bytes, numpy
    arrays); anything else (memoryview, bytearray) is copied once.
    """
    try:
        return _extend(crc, data)
    except TypeError:
        return _extend(crc, bytes(data))


def crc32c_prefixes(crc: int, pieces: Iterable) -> list[int]:
    """The crc32c of a stream at every boundary of `pieces` (bytes or contiguous uint8 numpy
    arrays): `[crc, crc after pieces[0], after pieces[1], ...]`.

    One pass over the bytes, iterated in C (`accumulate` calls the extension with no Python
    frame a piece): the stream's crc32c and, through `slice_crcs`, each piece's own crc32c
    come from it, so no byte is hashed twice.
    """
    return list(accumulate(pieces, _extend, initial=crc))


# crc32c is linear over GF(2): with Z_n the linear map "extend by n zero bytes" of the 32-bit state,
# extend(c, D) = Z_len(D)(c) ^ extend(0, D) for any c. So the crc32c of a slice D of a stream is
# crc_after ^ Z_len(D)(crc_before) (see slice_crcs). Z_n is kept as four 256-entry tables (one a
# byte of the state) for n = 2**j, j = 0, 1, ...; Z_1(x) = ~extend(~x, b"\0").
_BYTE_BITS = ((np.arange(256, dtype=np.uint32)[:, None] >> np.arange(8, dtype=np.uint32)) & 1).astype(bool)
_ZERO_TABLES: list[np.ndarray] = []  # [j]: (4, 256) uint32, the map Z_(2**j)
_TABLES_LOCK = threading.Lock()


def _tables_of(images: np.ndarray) -> np.ndarray:
    """A linear map of 32-bit values, given by the images of its 32 unit vectors, as byte tables."""
    return np.stack(
        [np.bitwise_xor.reduce(np.where(_BYTE_BITS, images[8 * q : 8 * q + 8], 0), axis=1) for q in range(4)]
    ).astype(np.uint32)


def _apply(tables: np.ndarray, values: np.ndarray) -> np.ndarray:
    return (
        tables[0][values & 0xFF]
        ^ tables[1][(values >> 8) & 0xFF]
        ^ tables[2][(values >> 16) & 0xFF]
        ^ tables[3][values >> 24]
    )


def _zero_tables(bits: int) -> list[np.ndarray]:
    """The tables of Z_(2**j) for j < bits (built once a process, by squaring Z_1)."""
    if len(_ZERO_TABLES) < bits:
        with _TABLES_LOCK:
            if not _ZERO_TABLES:
                units = [1 << b for b in range(32)]
                images = np.array([~_extend(~unit & 0xFFFFFFFF, b"\0") & 0xFFFFFFFF for unit in units], np.uint32)
                _ZERO_TABLES.append(_tables_of(images))
            while len(_ZERO_TABLES) < bits:
                last = _ZERO_TABLES[-1]
                images = _apply(last, _apply(last, np.array([1 << b for b in range(32)], np.uint32)))
                _ZERO_TABLES.append(_tables_of(images))
    return _ZERO_TABLES


def slice_crcs(prefixes, lengths) -> np.ndarray:
    """The crc32c of each slice of a stream (uint32), from the stream's crc32c at the slices'
    boundaries (`prefixes`, one more than the slices: see `crc32c_prefixes`) and their `lengths`.

    Vectorized: a few table look-ups a slice for each bit set in any length, no Python call a
    slice. Equal to `crc32c_extend(0, slice)` for every slice (tests/unit/format prove it).
    """
    prefixes = np.asarray(prefixes, dtype=np.uint32)
    lengths = np.asarray(lengths, dtype=np.int64)
    before = prefixes[:-1].copy()
    if len(lengths):
        if int(lengths.min()) < 0:
            raise ValueError("a slice of negative length")
        mixed = int(np.bitwise_or.reduce(lengths))
        tables = _zero_tables(mixed.bit_length())
        for bit in range(mixed.bit_length()):
            if not (mixed >> bit) & 1:
                continue
            has = (lengths >> bit) & 1
            if has.all():
                before = _apply(tables[bit], before)
            else:
                rows = np.flatnonzero(has)
                before[rows] = _apply(tables[bit], before[rows])
    return prefixes[1:] ^ before


def crc32c_text(crc: int) -> str:
    """Base64 of the big-endian value: GCS's `crc32c` object property."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode("ascii")


class Digests:
    """crc32c and sha256 of a byte stream, fed chunk by chunk."""

    def __init__(self) -> None:
        self.crc = 0
        self.sha = hashlib.sha256()

    def update(self, data) -> None:
        self.crc = crc32c_extend(self.crc, data)
        self.sha.update(data)

    @property
    def crc32c(self) -> str:
        return crc32c_text(self.crc)

    @property
    def sha256(self) -> str:
        return self.sha.hexdigest()


def crc32c_view(crc: int, view) -> int:
    """`crc` extended by a writable buffer (a bytearray, a memoryview of one) read in place."""
    return _extend(crc, np.frombuffer(view, np.uint8)) if len(view) else crc


class Crc32cReader(io.RawIOBase):
    """A stream's bytes, their crc32c computed as they pass (in place: no copy, no Python call a
    sample). Not seekable, so a parser reads every byte rather than seeking over payloads;
    `finish()` reads what the parser left after the end of the archive, so `crc`/`count` cover
    the whole object."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.crc = 0
        self.count = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, target) -> int:  # type: ignore[override]
        view = memoryview(target).cast("B")
        reader = getattr(self.stream, "readinto", None)
        if reader is not None:
            got = reader(view) or 0
        else:
            data = self.stream.read(len(view))
            got = len(data)
            view[:got] = data
        self.crc = crc32c_view(self.crc, view[:got])
        self.count += got
        return got

    def finish(self, piece: int = 1 << 20) -> Crc32cReader:
        """Read (and checksum) the rest of the stream, a piece at a time."""
        buffer = bytearray(piece)
        while self.readinto(buffer):
            pass
        return self

    @property
    def crc32c(self) -> str:
        return crc32c_text(self.crc)

    def close(self) -> None:
        self.stream.close()
        super().close()
