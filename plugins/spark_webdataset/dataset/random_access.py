"""Random access to a version's samples: `spark_webdataset.open(uri)[i]` and `.get(key)`.

The version's sample index (format/sample_index.py) says where each sample
lies; a sample costs one ranged read of its own bytes once its index block
is cached (the footer and a block are one read each, on gs:// one request
each). What is read is proven before it is returned: the bytes' crc32c is
the index's, they parse by the format's rules as exactly one sample, and
that sample has the key asked for; otherwise `SampleMismatch` names the
shard and the offset. Before that, the index row must lie inside a shard
the manifest lists (`CorruptIndex` naming the index file, no byte read),
and a damaged index or manifest file is `CorruptIndex`/`CorruptManifest`
naming it. Decoding is the caller's, as in webdataset.

A reader pickles to its location alone (no client, no cache), so each
worker of a torch `DataLoader` opens its own clients.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import CorruptManifest, InputError, NoSampleIndex, NotCommitted, SampleMismatch, TarFormatError
from ..format.checksums import crc32c_extend
from ..format.manifest import Manifest
from ..format.sample_index import Entry, IndexFile, check_entry
from ..format.sample_reader import READ_PIECE_BYTES, iter_samples
from ..format.tar_rules import ZERO_BLOCK
from ..storage import storage_for
from ..storage.base import RangeFile, Storage
from .index_layers import LayeredIndex, check_layer, index_parts
from .layout import Version
from .paths import check_shard_location
from .resolve import committed_version
from .tree import sample_index_path, sample_index_serial

DEFAULT_CACHE_BLOCKS = 256  # index blocks kept (~8192 samples each): a million samples' index is 123


def check_locations(manifest: Manifest, manifest_uri: str) -> Manifest:
    """`manifest` if every shard and its sample index are where the layout allows (inside the version,
    or `../<version>/<name>` for a referenced shard); CorruptManifest naming the file if not."""
    for entry in manifest.shards:
        try:
            check_shard_location(entry.location)
        except InputError as error:
            raise CorruptManifest(f"{manifest_uri}: shard location {entry.location!r}: {error}") from None
    index = manifest.sample_index
    try:
        known = index is None or sample_index_path(sample_index_serial(index)) == index
    except ValueError:
        known = False
    if not known:
        raise CorruptManifest(
            f"{manifest_uri}: sample index {index!r} is not a path the writer gives ({sample_index_path(0)}, ...)"
        )
    for layer in manifest.sample_index_layers:
        check_layer(layer, manifest_uri)
    return manifest


def read_bounded(storage: Storage, uri: str, offset: int, length: int) -> bytes:
    """`length` bytes from `offset` (fewer at the object's end): one request, or for a length over
    READ_PIECE_BYTES pieces of it until one comes back short, so memory is what the object holds."""
    if length <= READ_PIECE_BYTES:
        return storage.read_range(uri, offset, length)
    pieces, left = [], length
    while left > 0:
        piece = storage.read_range(uri, offset, min(left, READ_PIECE_BYTES))
        pieces.append(piece)
        offset, left = offset + len(piece), left - len(piece)
        if len(piece) < READ_PIECE_BYTES:
            break
    return b"".join(pieces)


class _IndexOpener:
    """Opens the index file (picklable, unlike a lambda)."""

    def __init__(self, uri: str, size: int) -> None:
        self.uri, self.size = uri, size

    def __call__(self) -> RangeFile:
        return RangeFile(storage_for(self.uri), self.uri, self.size)


def index_file(
    version_uri: str, manifest: Manifest, cache_blocks: int = DEFAULT_CACHE_BLOCKS
) -> IndexFile | LayeredIndex:
    """The version's sample index, read by ranged reads (NoSampleIndex if it has none): its one whole
    file, or its own file over its ancestors' layers (index_layers.py) when the manifest lists some."""
    if not manifest.sample_index or manifest.sample_index_bytes is None:
        raise NoSampleIndex(
            f"{version_uri} has no sample index (written before spark-webdataset kept one): "
            "write it again to read it by key"
        )
    check_locations(manifest, Version.at(version_uri).manifest_uri)
    path = storage_for(version_uri).join(version_uri, manifest.sample_index)
    if manifest.sample_index_layers:
        version = Version.at(version_uri)
        listed = [entry.location for entry in manifest.shards]
        return LayeredIndex(index_parts(version, manifest), listed, cache_blocks, name=path)
    return IndexFile(_IndexOpener(path, manifest.sample_index_bytes), cache_blocks, name=path)


class VersionSamples(Sequence[dict]):
    """A version's samples in key order: `len(r)`, `r[i]`, `r.get(key)`, `r.keys()`.

    A sample is a dict: `__key__` and one entry per field, its bytes."""

    def __init__(self, version_uri: str, manifest: Manifest, cache_blocks: int = DEFAULT_CACHE_BLOCKS) -> None:
        self.uri = version_uri
        self.fields = [field["name"] for field in manifest.fields]
        self._index = index_file(version_uri, manifest, cache_blocks)  # the manifest's locations checked first
        self._shards = Version.at(version_uri).location_uris(manifest)  # location -> where its bytes are
        self._sizes = {entry.location: entry.bytes for entry in manifest.shards}
        self._samples = manifest.samples

    def __len__(self) -> int:
        return self._samples

    def __getitem__(self, position: int | str) -> dict:  # type: ignore[override]
        if isinstance(position, str):
            return self.get(position)
        if isinstance(position, slice):
            raise TypeError("read samples one at a time: r[i] or r.get(key)")
        return self.read(self._index.at(position))

    def get(self, key: str) -> dict:  # type: ignore[override]
        """The sample with `key`; KeyError if the version has none."""
        entry = self._index.get(key)
        if entry is None:
            raise KeyError(key)
        return self.read(entry)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._index.get(key) is not None

    def locate(self, key: str) -> Entry | None:
        """Where the sample with `key` lies (shard, offset, length, crc32c), without reading it."""
        return self._index.get(key)

    def locate_at(self, position: int) -> Entry:
        """Where the `position`-th sample in key order lies, without reading it."""
        return self._index.at(position)

    def keys(self) -> Iterator[str]:
        """Every key, in order (the index a block at a time; no shard is read)."""
        return self._index.keys()

    def read(self, entry: Entry) -> dict[str, Any]:
        """The sample `entry` locates: one ranged read, proven against the entry (else SampleMismatch);
        an entry that cannot be in its shard is CorruptIndex before anything is read."""
        check_entry(entry, self._sizes, self._index.name)
        shard = self._shards[entry.shard]
        data = read_bounded(storage_for(shard), shard, entry.offset, entry.length)
        where = f"shard {shard} at offset {entry.offset}"
        if len(data) != entry.length or crc32c_extend(0, data) != entry.crc32c:
            raise SampleMismatch(
                f"{where}: the {len(data)} bytes of sample {entry.key!r} are not the {entry.length} bytes written "
                f"(crc32c differs from the index's): the shard changed after it was written"
            )
        try:
            samples = list(iter_samples(io.BytesIO(data + ZERO_BLOCK + ZERO_BLOCK), offset=0))
        except TarFormatError as error:
            raise SampleMismatch(f"{where}: sample {entry.key!r} does not parse: {error.message}") from None
        if len(samples) != 1 or samples[0].key != entry.key:
            found = [sample.key for sample in samples]
            raise SampleMismatch(f"{where}: expected sample {entry.key!r}, found {found}")
        return {"__key__": entry.key, **samples[0].fields}

    def __iter__(self) -> Iterator[dict]:
        for position in range(len(self)):
            yield self[position]

    def __repr__(self) -> str:
        return f"VersionSamples({self.uri!r}, {len(self)} samples)"

    def __getstate__(self) -> dict:
        return self.__dict__.copy()  # the IndexFile pickles to its opener alone


def open_samples(uri: str, cache_blocks: int = DEFAULT_CACHE_BLOCKS) -> VersionSamples:
    """Random access to a version directory, or to a dataset root's LATEST (checked against its publish record)."""
    version, manifest = committed_version(uri)
    if manifest is None:
        raise NotCommitted(f"{uri}: no manifest there: not a version our writer committed, nor a dataset root")
    return VersionSamples(version.uri, manifest, cache_blocks)
