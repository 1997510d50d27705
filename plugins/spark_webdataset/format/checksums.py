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

    def finish(self, piece: int = 1 << 20) -> "Crc32cReader":
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
