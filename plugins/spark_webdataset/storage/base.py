"""The storage interface the writer, validator and publisher are built on."""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import PreconditionFailed, StorageError

__all__ = ["PreconditionFailed", "Storage", "StorageError", "StoredObject"]


def split_bucket(uri: str, scheme: str) -> tuple[str, str]:
    """(bucket, object name) of `scheme://bucket/name`: the one parse of a cloud URI."""
    prefix = f"{scheme}://"
    if not uri.startswith(prefix):
        article = "an" if scheme[0] in "aefhilmnorsx" else "a"  # spelled out: "an s3://", "a gs://"
        raise StorageError(f"{uri}: not {article} {prefix} URI")
    bucket, _, name = uri[len(prefix) :].partition("/")
    if not bucket:
        raise StorageError(f"{uri}: no bucket")
    return bucket, name


@dataclass(frozen=True)
class StoredObject:
    """What a listing says of one object: its size, its identity (`identities`) and the server's
    crc32c (None where the store keeps none)."""

    size: int
    identity: object
    crc32c: str | None = None


class Storage(ABC):
    concurrent_requests: int = 1
    """How many requests a caller keeps in flight at once on this storage: latency-bound stores
    (gs://, s3://) want many (the commit's renames, deletes, HEADs, probes); local disk one."""

    @abstractmethod
    def join(self, base: str, *parts: str) -> str: ...

    @abstractmethod
    def open_write(self, path: str) -> BinaryIO:
        """A stream to a new object; it exists under `path` once closed."""

    @abstractmethod
    def open_read(self, path: str) -> BinaryIO: ...

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def list_sizes(self, directory: str) -> dict[str, int]:
        """Names (relative to `directory`, one level) and sizes of the objects in it."""

    @abstractmethod
    def list_dirs(self, directory: str) -> list[str]:
        """Names of the sub-directories (prefixes) one level below `directory`."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove one object; a missing one is fine."""

    @abstractmethod
    def delete_tree(self, directory: str) -> None:
        """Remove everything under `directory`; missing is fine."""

    @abstractmethod
    def rename_new(self, source: str, target: str) -> None:
        """Give a finished object a name no object holds: PreconditionFailed if `target` exists.
        The commit names shards with it, so a late writer can never replace a committed shard."""

    @abstractmethod
    def same_object(self, first: str, second: str) -> bool:
        """Both paths hold the same bytes (a rename whose copy landed and whose source delete did not)."""

    @abstractmethod
    def identities(self, directory: str) -> dict[str, object]:
        """Names (one level) and identities of the objects in `directory`: an identity changes
        whenever another object takes the name or its bytes are written (a GCS generation; locally
        inode, mtime, ctime and size). It is a cache of "already verified", never the proof: an
        equal identity means the bytes verified then are still there; a different one (a copied
        root, a rewrite) means read them again. It says nothing of which bytes an object holds."""

    @abstractmethod
    def delete_if_identity(self, path: str, identity: object) -> bool:
        """Delete `path` only if it is still the object `identities` saw; True if deleted."""

    @abstractmethod
    def write_atomic(self, path: str, data: bytes) -> None:
        """Readers see the old object or all of the new one, never part."""

    @abstractmethod
    def create_only(self, path: str, data: bytes) -> None:
        """Write `path` only if it does not exist; else raise PreconditionFailed."""

    @abstractmethod
    def read_versioned(self, path: str) -> tuple[bytes | None, object]:
        """The object's bytes (None if absent) and a token for `replace_if`."""

    @abstractmethod
    def replace_if(self, path: str, data: bytes, token: object) -> bool:
        """Compare-and-swap: write only if the object is still as `read_versioned` saw it."""

    @abstractmethod
    def delete_if(self, path: str, token: object) -> bool:
        """Delete only if the object is still as `read_versioned` saw it."""

    @abstractmethod
    def newest_modification(self, directory: str) -> float | None:
        """Epoch seconds of the newest change to any object below `directory` (recursive); None if empty."""

    @abstractmethod
    def remove_empty_dir(self, directory: str) -> None:
        """Remove `directory` if it holds nothing (object stores have no directories: a no-op)."""

    def missing_dirs(self, directory: str) -> list[str]:
        """`directory` and its ancestors that do not exist yet, deepest first: what a write into it
        would create, so that a write that fails can remove them again (object stores: none)."""
        return []

    def crc32c_below(self, directory: str) -> dict[str, str] | None:
        """The crc32c the server keeps for every object below `directory` (recursive), by path
        relative to it, as GCS reports it (base64 of the big-endian value); None if this storage
        keeps none (local files: checking them would mean reading every byte again)."""
        return None

    def objects(self, directory: str) -> dict[str, StoredObject]:
        """Every object one level below `directory` with its size, identity and crc32c: one listing
        where the store gives all three (GCS), three calls otherwise."""
        identities = self.identities(directory)
        crcs = self.crc32c_below(directory) or {}
        return {
            name: StoredObject(size, identities.get(name), crcs.get(name))
            for name, size in self.list_sizes(directory).items()
        }

    def read_bytes(self, path: str) -> bytes:
        with self.open_read(path) as stream:
            return stream.read()

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """`length` bytes from `offset` (fewer at the object's end): one request on an object store."""
        with self.open_read(path) as stream:
            stream.seek(offset)
            return stream.read(length)


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over an object of known size whose every read is one
    `read_range`, unless it falls inside the range last `prefetch`ed: a parquet row group's
    column chunks are then one request, read in the caller's thread (pyarrow's own pre-buffering
    reads on its I/O threads, which must not call into a Python file at interpreter exit)."""

    def __init__(self, storage: Storage, path: str, size: int) -> None:
        self.storage, self.path, self.size = storage, path, size
        self.position = 0
        self._cached_at = 0
        self._cached = b""

    def prefetch(self, offset: int, length: int) -> None:
        """Read [offset, offset + length) now, in one request; later reads inside it cost none."""
        self._cached_at, self._cached = offset, self.storage.read_range(self.path, offset, length)

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
        start = self.position - self._cached_at
        if start >= 0 and end - self._cached_at <= len(self._cached):
            data = self._cached[start : end - self._cached_at]
        else:
            data = self.storage.read_range(self.path, self.position, end - self.position)
        self.position += len(data)
        return data

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)
