"""The `webdataset` reader: one partition per shard, Arrow batches out.

`load()` takes a version directory (its manifest lists the shards), a
dataset root (its LATEST published version) or a shard pattern (brace
ranges and globs). Rows are `__key__`, `__url__`, then one column per
field: binary unless the user's schema asks for another type. Fields the
schema leaves out are skipped in the tar, never read into Python. With
key options, a version's sample index says which samples are in range:
shards without one are not opened, and of the others only the selected
samples' bytes are read (the whole shard when they are most of it).

What is returned was checked (docs: "Every byte a reader returns was
checked"): a whole shard of a version is read through a crc32c that is
compared with its manifest entry's at the end of the shard (the task fails
with ChecksumMismatch); selected samples are each compared with their
index row's crc32c (SampleMismatch), and every index row is checked
against the manifest before anything is read (CorruptIndex). Plain tars
without a manifest have nothing to be checked against and read as they are.
"""

from __future__ import annotations

import fnmatch
import io
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from ..errors import (
    BadOption,
    ChecksumMismatch,
    CorruptIndex,
    InputError,
    ManifestChanged,
    SampleMismatch,
    TarFormatError,
)
from ..format.checksums import Crc32cReader, crc32c_view
from ..format.manifest import Manifest, ShardEntry
from ..format.names import KEY_COLUMN
from ..format.ustar import END_OF_ARCHIVE
from ..storage import storage_for
from .options import KeyRange, ReadOptions

log = logging.getLogger(__name__)
URL_COLUMN = "__url__"
INFER_SAMPLES = 1000
WHOLE_SHARD_FRACTION = 0.5  # selected samples holding more of a shard than this: read it whole, filter rows
SPAN_READ_BYTES = 8 << 20  # a run of selected samples up to this size is one ranged read; longer ones stream


def _expand_braces(pattern: str) -> list[str]:
    from braceexpand import braceexpand

    return list(braceexpand(pattern))


def _match(pattern: str) -> list[str]:
    """Shards matching a glob pattern (one directory level of wildcards)."""
    storage = storage_for(pattern)
    directory, name = pattern.rsplit("/", 1) if "/" in pattern else (".", pattern)
    return [storage.join(directory, n) for n in sorted(storage.list_sizes(directory)) if fnmatch.fnmatch(n, name)]


def resolve(uri: str) -> tuple[list[str], Manifest | None]:
    """The shard URLs `uri` names, and the manifest that lists them if there is one."""
    urls, manifest, _ = resolve_version(uri)
    return urls, manifest


def resolve_version(uri: str) -> tuple[list[str], Manifest | None, str | None]:
    """`resolve`, with the version directory whose manifest it is (None for plain tars).

    A dataset root reads its LATEST version (checked against its publish
    record); a directory our writer staged into reads its manifest or is
    refused as not committed; a plain directory of tars (other tools'
    shards) and an explicit pattern list tars.
    """
    storage = storage_for(uri)
    base = uri.rstrip("/")
    if base.endswith(".tar") and storage.exists(base):
        return [base], None, None
    if not any(c in base for c in "*?[{"):
        from ..dataset.random_access import check_locations
        from ..dataset.resolve import committed_version

        version, manifest = committed_version(base)
        if manifest is not None:
            check_locations(manifest, version.manifest_uri)
            return [version.entry_uri(shard) for shard in manifest.shards], manifest, version.uri
        names = sorted(n for n in storage.list_sizes(base) if n.endswith(".tar"))
        if not names:
            raise InputError(f"{uri}: no manifest, LATEST or .tar shards there")
        return [storage.join(base, n) for n in names], None, None
    urls: list[str] = []
    for pattern in _expand_braces(base):
        if any(c in pattern for c in "*?["):
            urls += _match(pattern)
        elif storage.exists(pattern):
            urls.append(pattern)
        else:
            raise InputError(f"shard {pattern} (from pattern {uri}) does not exist")
    if not urls:
        raise InputError(f"{uri}: the pattern matches no shard")
    return urls, None, None


Selected = tuple[int, int, str, int]  # a selected sample: offset, length, key, crc32c (from the index)


def selected_samples(version_uri: str, manifest: Manifest, keys: KeyRange) -> dict[str, list[Selected]]:
    """The samples in the key range by the version's index: shard location -> [(offset, length, key,
    crc32c)] in shard order; every row checked against the manifest first (CorruptIndex)."""
    from ..dataset.random_access import index_file
    from ..format.sample_index import Entry, check_entry

    lowest = max((bound for bound in (keys.minimum, keys.prefix) if bound is not None), default=None)
    found: dict[str, list[Selected]] = {}
    sizes = {entry.location: entry.bytes for entry in manifest.shards}
    index = index_file(version_uri, manifest)
    for first_key, block in index.blocks_from(lowest):
        if first_key is not None and not keys.may_hold(first_key, first_key) and first_key > (lowest or ""):
            break  # this block starts past the range: so do all later ones
        rows = block.filter(keys.mask(block.column("key")))
        for row in zip(*(rows.column(name).to_pylist() for name in ("key", "shard", "offset", "length", "crc32c"))):
            entry = check_entry(Entry(*row), sizes, index.name)
            found.setdefault(entry.shard, []).append((entry.offset, entry.length, entry.key, entry.crc32c))
    for samples in found.values():
        samples.sort()
        for before, after in zip(samples, samples[1:]):
            if after[0] < before[0] + before[1]:
                raise CorruptIndex(
                    f"{index.name}: the rows of {before[2]!r} and {after[2]!r} overlap in their shard: the index is damaged"
                )
    return found


def infer_fields(urls: Sequence[str], skip_bad_shards: bool = False) -> list[str]:
    """Fields seen in the first samples of the first good shard, in first-seen order."""
    from ..format.sample_reader import iter_samples

    for url in urls:
        storage = storage_for(url)
        fields: dict[str, None] = {}
        try:
            with storage.open_read(url) as stream:
                for count, sample in enumerate(iter_samples(stream, fields=set())):
                    fields.update(dict.fromkeys(sample.fields))
                    if count >= INFER_SAMPLES:
                        break
        except TarFormatError as error:
            error.in_shard(url)
            if not skip_bad_shards:
                raise TarFormatError(
                    f"cannot infer the fields: {error.message}", error.offset, error.key, url
                ) from None
            log.warning("webdataset: skipped bad shard %s while inferring the fields: %s", url, error)
            continue
        return list(fields)
    raise InputError(f"no readable shard to infer the fields from among {len(urls)} (all were bad)")


def default_schema(options: ReadOptions) -> StructType:
    urls, manifest = resolve(options.path)
    names = [f["name"] for f in manifest.fields] if manifest else infer_fields(urls, options.skip_bad_shards)
    return StructType(
        [StructField(KEY_COLUMN, StringType(), False), StructField(URL_COLUMN, StringType(), False)]
        + [StructField(name, BinaryType(), True) for name in names]
    )


@dataclass
class ShardPartition(InputPartition):
    url: str
    index: int
    expected: ShardEntry | None = None  # from the manifest: the shard must still be this one
    samples: list[Selected] | None = None  # (offset, length, key, crc32c) to read; None: the whole shard


class WebDatasetReader(DataSourceReader):
    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        names = [f.name for f in schema.fields]
        if KEY_COLUMN not in names:
            raise BadOption(f"the read schema must hold {KEY_COLUMN!r} (a string)")
        self.fields = [f.name for f in schema.fields if f.name not in (KEY_COLUMN, URL_COLUMN)]
        self.urls, manifest, version_uri = resolve_version(options.path)
        self.version_uri = version_uri
        self.entries: list[ShardEntry | None] = list(manifest.shards) if manifest else [None] * len(self.urls)
        self.samples: dict[int, list[Selected]] = {}
        if options.keys is not None and manifest is not None and manifest.sample_index and version_uri:
            by_name = selected_samples(version_uri, manifest, options.keys)
            self.selected = [index for index, entry in enumerate(manifest.shards) if entry.location in by_name]
            for index in self.selected:
                chosen = by_name[manifest.shards[index].location]
                if sum(sample[1] for sample in chosen) <= WHOLE_SHARD_FRACTION * manifest.shards[index].bytes:
                    self.samples[index] = chosen
        else:
            # A shard written from ascending keys holds nothing outside [first_key, last_key]: one
            # whose range cannot meet the key options is not opened (the others filter their rows).
            self.selected = [
                index
                for index, entry in enumerate(self.entries)
                if options.keys is None
                or entry is None
                or not entry.keys_ascending
                or options.keys.may_hold(entry.first_key, entry.last_key)
            ]
        if len(self.selected) < len(self.entries):
            log.info("webdataset: the key options leave %d of %d shards to read", len(self.selected), len(self.entries))

    def partitions(self) -> Sequence[InputPartition]:
        return [
            ShardPartition(self.urls[index], index, self.entries[index], self.samples.get(index))
            for index in self.selected
        ]

    def read(self, partition: ShardPartition) -> Iterator[pyarrow.RecordBatch]:  # noqa: F821
        if not isinstance(partition, ShardPartition):
            return  # filters left no shard: Spark still runs one empty partition
        try:
            if partition.samples is not None:
                yield from self._sample_batches(partition.url, partition.samples)
                return
            if self.options.skip_bad_shards:
                _check_structure(partition.url)
            yield from self._batches(partition.url, partition.expected)
        except TarFormatError as error:
            error.in_shard(partition.url)
            if not self.options.skip_bad_shards:
                raise error from None
            self._record_bad_shard(partition, error)

    def _sample_batches(self, url: str, samples: list[Selected]) -> Iterator[pyarrow.RecordBatch]:  # noqa: F821
        """The selected samples alone: each run of adjacent ones one ranged read (or a stream, if long),
        each sample's bytes checked against its index row's crc32c before the run is parsed as a tar of
        its own; they must be the samples the index put there."""
        from pyspark.sql.pandas.types import to_arrow_schema

        from ..format.fast_read import read_sample_batches

        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        storage = storage_for(url)
        for run in _runs(samples):
            start, end = run[0][0], run[-1][0] + run[-1][1]
            checks = _SampleChecks(url, run)
            if end - start <= SPAN_READ_BYTES:
                data = bytearray(storage.read_range(url, start, end - start))
                checks.feed(memoryview(data))
                checks.finish()
                stream: io.RawIOBase = io.BytesIO(bytes(data) + END_OF_ARCHIVE)
            else:
                stream = _Span(storage.open_read(url), start, end, checks)
            expected = [sample[2] for sample in run]
            with stream:
                found: list[str] = []
                for batch in read_sample_batches(stream, self.fields, shard_bytes=end - start + len(END_OF_ARCHIVE)):
                    found += batch.keys.to_pylist()
                    yield self._record_batch(batch, url, arrow_schema)
            if found != expected:
                raise SampleMismatch(
                    f"{url}: at offset {start} the sample index puts {len(expected)} sample(s) ({expected[0]!r}...), "
                    f"but the shard holds {found[:3]!r}...: the version changed after it was indexed; read it again"
                )

    def _record_batch(self, batch, url: str, arrow_schema) -> pyarrow.RecordBatch:  # noqa: F821
        """Spark's columns from a batch of samples: binary as parsed, other types decoded."""
        import pyarrow as pa

        from ..format.decode import decode_column

        rows = len(batch.keys)
        keys: list[str] | None = None  # as Python strings, only to name a value that does not decode
        arrays = []
        for field in arrow_schema:
            if field.name == KEY_COLUMN:
                arrays.append(batch.keys.cast(field.type))
            elif field.name == URL_COLUMN:
                arrays.append(pa.repeat(pa.scalar(url, field.type), rows))
            elif field.type == pa.binary():
                arrays.append(batch.columns[field.name])
            else:
                keys = batch.keys.to_pylist() if keys is None else keys
                values = batch.columns[field.name].to_pylist()
                arrays.append(decode_column(values, field.type, field.name, keys))
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)

    def _batches(self, url: str, expected: ShardEntry | None) -> Iterator[pyarrow.RecordBatch]:  # noqa: F821
        """A record batch per chunk of the shard (format/fast_read.py): binary columns go to Spark as parsed.

        A shard its manifest gives a crc32c for is read through one (every byte, no seeks) and
        compared at its end: the task fails with ChecksumMismatch rather than end with other bytes."""
        from pyspark.sql.pandas.types import to_arrow_schema

        from ..format.fast_read import read_sample_batches

        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        storage = storage_for(url)
        count, first_key, last_key = 0, None, None
        checked = expected is not None and expected.crc32c is not None
        with storage.open_read(url) as raw:
            stream = Crc32cReader(raw) if checked else raw
            shard_bytes = expected.bytes if checked else None
            for batch in read_sample_batches(stream, self.fields, shard_bytes=shard_bytes):
                rows = len(batch.keys)
                count += rows
                first_key = batch.keys[0].as_py() if first_key is None else first_key
                last_key = batch.keys[rows - 1].as_py()
                if self.options.keys is not None:  # only the range's rows are decoded and sent
                    batch = batch.filter(self.options.keys.mask(batch.keys))
                    if not len(batch.keys):
                        continue
                yield self._record_batch(batch, url, arrow_schema)
            if checked:
                stream.finish()
        if expected is not None and (count, first_key, last_key) != (
            expected.samples,
            expected.first_key,
            expected.last_key,
        ):
            raise ManifestChanged(
                f"{url}: the shard holds {count} samples ({first_key!r}..{last_key!r}) but the manifest read "
                f"when the query started lists {expected.samples} ({expected.first_key!r}..{expected.last_key!r}): "
                "the version was overwritten while it was read; read it again"
            )
        if checked and (stream.count, stream.crc32c) != (expected.bytes, expected.crc32c):
            raise ChecksumMismatch(
                f"{url}: shard {expected.location} of version {self.version_uri} has {stream.count} bytes of crc32c "
                f"{stream.crc32c}, its manifest {expected.bytes} bytes of crc32c {expected.crc32c}: the shard changed "
                "after it was written; its rows were not all what validation proved"
            )

    def _record_bad_shard(self, partition: ShardPartition, error: Exception) -> None:
        import json
        import sys

        print(f"webdataset: skipped bad shard {partition.url}: {error}", file=sys.stderr, flush=True)
        if self.options.bad_shards_dir:
            os.makedirs(self.options.bad_shards_dir, exist_ok=True)
            record = os.path.join(self.options.bad_shards_dir, f"{partition.index:06d}.json")
            with open(record, "w") as out:
                json.dump({"shard": partition.url, "error": str(error)}, out)


def _runs(samples: list[Selected]) -> Iterator[list[Selected]]:
    """Samples (offset, length, key, crc32c) in shard order as runs of adjacent ones."""
    run: list[Selected] = []
    for sample in samples:
        if run and sample[0] != run[-1][0] + run[-1][1]:
            yield run
            run = []
        run.append(sample)
    if run:
        yield run


class _SampleChecks:
    """A run's bytes, fed in order, checked sample by sample against the crc32c of its index row
    (a Python call at each sample's end, none a byte)."""

    def __init__(self, url: str, run: list[Selected]) -> None:
        self.url, self.run = url, run
        self.at = 0  # the sample being read
        self.left = run[0][1]  # its bytes still to come
        self.crc = 0

    def feed(self, view: memoryview) -> None:
        while len(view):
            if self.at >= len(self.run):
                return  # past the run (the end-of-archive blocks)
            take = min(self.left, len(view))
            self.crc = crc32c_view(self.crc, view[:take])
            self.left -= take
            view = view[take:]
            if not self.left:
                self._check()

    def _check(self) -> None:
        offset, length, key, expected = self.run[self.at]
        if self.crc != expected:
            raise SampleMismatch(
                f"{self.url} at offset {offset}: the {length} bytes of sample {key!r} are not the bytes written "
                "(crc32c differs from the index's): the shard changed after it was written"
            )
        self.at += 1
        self.crc = 0
        self.left = self.run[self.at][1] if self.at < len(self.run) else 0

    def finish(self) -> None:
        if self.at < len(self.run):
            offset, length, key, _ = self.run[self.at]
            raise SampleMismatch(
                f"{self.url} at offset {offset}: the shard ends inside sample {key!r} ({length} bytes by the index): "
                "the shard changed after it was written"
            )


class _Span(io.RawIOBase):
    """Bytes [start, end) of a shard stream, checked by `checks` as they pass, then the
    end-of-archive blocks: a tar of those samples."""

    def __init__(self, stream, start: int, end: int, checks: _SampleChecks) -> None:
        self.stream = stream
        stream.seek(start)
        self.left = end - start
        self.tail = END_OF_ARCHIVE
        self.checks = checks

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        if self.left > 0:
            data = self.stream.read(min(len(view), self.left))
            if not data:
                self.checks.finish()
                raise SampleMismatch("the shard ended before the samples its index lists")
            self.left -= len(data)
            view[: len(data)] = data
            self.checks.feed(view[: len(data)])
            if not self.left:
                self.checks.finish()
            return len(data)
        data, self.tail = self.tail[: len(view)], self.tail[len(view) :]
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.stream.close()
        super().close()


def _check_structure(url: str) -> None:
    """One pass over the headers (no payload copied): a shard we would skip fails here, before any row."""
    from ..format.fast_read import read_sample_batches

    storage = storage_for(url)
    with storage.open_read(url) as stream:
        for _ in read_sample_batches(stream, []):
            pass
