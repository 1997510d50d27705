"""Changes against a parent: the samples a write replaces or removes, and the shards rewritten without them.

An upsert's or a delete's keys are looked up in the base index's live
rows (the parent's, its shards as references; in every layer, the blocks the keys fall in): the
rows they hit go, and the shards those rows lie in are the touched ones. A second read
collects what the touched shards keep (the blocks of their key ranges when they were written
key-sorted, checked against their sample counts). Each touched shard is rewritten as
the concatenation of the samples it keeps (a sample's bytes are
contiguous, headers and padding included, and their crc32c travels with
them) and the end-of-archive: copy-on-write at the cost of what it keeps,
by ranged reads of those samples. No other shard is opened; every other
shard stays referenced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ChecksumMismatch, CorruptIndex
from ..format.checksums import Digests, crc32c_extend
from ..format.manifest import Manifest, ShardEntry
from ..format.ustar import END_OF_ARCHIVE
from .build_rules import APPEND, CHANGES, DELETE, UPSERT  # noqa: F401 - the change kinds, defined with their rules
from .index_layers import rows_in_shards
from .tree import shard_name, staged_shard_name

if TYPE_CHECKING:
    from .index_merge import BaseIndex
    from .layout import Version

log = logging.getLogger(__name__)

REWRITES_DIR = "rewrites"  # in the job's staging directory: the rewritten shards, by sequence
READ_BYTES = 64 << 20  # at most this much of a run of kept samples in one ranged read
_KEY = pa.large_string()


@dataclass(frozen=True)
class Rewrite:
    """One touched shard: the samples it keeps, copied into a new shard of this version."""

    source: ShardEntry  # the base manifest's entry it replaces
    source_uri: str
    kept: pa.Table  # key, offset, length, crc32c of the samples it keeps, by offset
    name: str  # its final name
    staged: str  # where the commit stages it

    @property
    def new_offsets(self) -> pa.Array:
        """Where each kept sample lands: right after the one before it."""
        lengths = self.kept.column("length").combine_chunks()
        ends = pc.cumulative_sum(lengths) if len(lengths) else pa.array([], pa.int64())
        return pc.subtract(ends, lengths)


@dataclass
class ChangePlan:
    """What an upsert or delete does to its base, decided from the index alone."""

    kind: str
    requested: int  # rows given: keys to upsert, or to delete (repeats included)
    removed_keys: pa.Array  # base keys that go (replaced or deleted), sorted
    requested_unique: int = 0  # distinct keys given
    rewrites: list[Rewrite] = field(default_factory=list)
    emptied: set[str] = field(default_factory=set)  # locations of base shards none of whose samples stay
    moved: pa.Table | None = None  # key, shard, offset, length, crc32c of every sample a rewrite moves

    @property
    def absent(self) -> int:
        """Keys a delete names that the base does not hold: counted and reported, not an error."""
        return self.requested_unique - len(self.removed_keys) if self.kind == DELETE else 0

    def moved_rows(self) -> pa.RecordBatch | None:
        """The index rows of the samples the rewrites moved, at their new shard and offset, sorted by
        key (the base's rows of a rewritten shard are dead in the new version: its shard is gone)."""
        if self.moved is None or not len(self.moved):
            return None
        from ..format.sample_index import MERGE_SCHEMA

        rows = self.moved.sort_by([("key", "ascending")]).select(MERGE_SCHEMA.names).cast(MERGE_SCHEMA)
        return pa.concat_batches(rows.to_batches()) if rows.num_rows else None

    def entries(self, base: Manifest, written: dict[str, ShardEntry]) -> list[ShardEntry]:
        """The base's shards with each touched one replaced in place by its rewrite (or gone)."""
        by_source = {rewrite.source.location: written[rewrite.name] for rewrite in self.rewrites}
        return [by_source.get(shard.location, shard) for shard in base.shards if shard.location not in self.emptied]

    def summary(self, added: int) -> dict[str, Any]:
        """What the change did, for the manifest's run section and the job's summary."""
        removed = len(self.removed_keys)
        return {
            "change": self.kind,
            "requested": self.requested,
            "added": added,
            "replaced": removed if self.kind == UPSERT else 0,
            "deleted": removed if self.kind == DELETE else 0,
            "absent": self.absent,
            "shards_rewritten": len(self.rewrites),
            "shards_emptied": len(self.emptied),
            "samples_copied": sum(len(rewrite.kept) for rewrite in self.rewrites),
        }


def unique_keys(runs: Iterable[pa.Array]) -> tuple[pa.Array, int]:
    """The keys of the tasks' runs, sorted and once each; and how many were given."""
    arrays = [run.cast(_KEY) for run in runs]
    given = sum(len(array) for array in arrays)
    if not arrays:
        return pa.array([], _KEY), 0
    keys = pc.unique(pa.chunked_array(arrays, _KEY).combine_chunks())
    return keys.take(pc.sort_indices(keys)), given


def plan_change(
    kind: str,
    keys: pa.Array,
    requested: int,
    base: Manifest,
    base_index: BaseIndex | None,
    version: Version,
    first_number: int,
    staging_root: str,
) -> ChangePlan:
    """Which base samples `keys` remove and which shards are rewritten, from the base index's blocks
    the keys fall in and then the blocks of the touched shards' key ranges (none of a shard's bytes);
    rewrites take the names from `first_number` on."""
    plan = ChangePlan(kind, requested, pa.array([], _KEY), requested_unique=len(keys))
    if base_index is None or not len(keys):
        return plan
    hits = [batch for batch in base_index.rows_holding(keys) if len(batch)]
    if not hits:
        return plan
    removed = pa.Table.from_batches(hits)
    removed_keys = removed.column("key").combine_chunks()
    plan.removed_keys = removed_keys.take(pc.sort_indices(removed_keys))  # the base's layers come one after another
    touched = pc.unique(removed.column("shard").combine_chunks())
    entries = {shard.location: shard for shard in base.shards}
    kept = _kept_rows(base_index, touched, plan.removed_keys, removed, entries, hits[0].schema)
    storage = version.storage
    number = first_number
    for location in sorted(touched.to_pylist()):
        rows = kept.filter(pc.equal(kept.column("shard"), location)).select(["key", "offset", "length", "crc32c"])
        if not len(rows):
            plan.emptied.add(location)
            continue
        source = entries[location]
        plan.rewrites.append(
            Rewrite(
                source=source,
                source_uri=version.location_uri(location),
                kept=rows,
                name=shard_name(number),
                staged=storage.join(staging_root, REWRITES_DIR, staged_shard_name(number)),
            )
        )
        number += 1
    if plan.rewrites:
        plan.moved = pa.concat_tables(
            pa.table(
                {
                    "key": rewrite.kept.column("key").combine_chunks().cast(_KEY),
                    "shard": pa.array([rewrite.name] * len(rewrite.kept), pa.string()),
                    "offset": rewrite.new_offsets,
                    "length": rewrite.kept.column("length").combine_chunks(),
                    "crc32c": rewrite.kept.column("crc32c").combine_chunks(),
                }
            )
            for rewrite in plan.rewrites
        )
    return plan


def _kept_rows(
    base_index: BaseIndex,
    touched: pa.Array,
    removed_keys: pa.Array,
    removed: pa.Table,
    entries: dict[str, ShardEntry],
    schema: pa.Schema,
) -> pa.Table:
    """The rows the touched shards keep, by shard and offset: read from the blocks of the shards' key
    ranges when every touched shard was written key-sorted (`keys_ascending`), else from every block.
    Each touched shard's rows, kept and removed, must add up to its samples: a range that missed a row
    (a manifest whose ranges lie) is read again whole, and an index that still falls short is refused
    rather than a sample dropped."""
    sources = [entries[location] for location in touched.to_pylist()]
    ranges = [(s.first_key, s.last_key) for s in sources] if all(s.keys_ascending for s in sources) else None
    removed_by_shard = _counts(removed.column("shard"))
    wanted = frozenset(touched.to_pylist())
    while True:
        rows = pa.Table.from_batches(
            (rows_in_shards(batch, wanted) for batch in base_index.rows_between(ranges)), schema=schema
        )
        gone = pc.is_in(rows.column("key"), value_set=removed_keys)  # one set of the removed keys, not one a block
        kept = rows.filter(pc.invert(gone)).sort_by([("shard", "ascending"), ("offset", "ascending")])
        kept_by_shard = _counts(kept.column("shard"))
        short = [
            s for s in sources if kept_by_shard.get(s.location, 0) + removed_by_shard.get(s.location, 0) != s.samples
        ]
        if not short:
            return kept
        if ranges is None:
            shard = short[0]
            found = kept_by_shard.get(shard.location, 0) + removed_by_shard.get(shard.location, 0)
            raise CorruptIndex(
                f"the base's sample index has {found} live rows of shard {shard.location}, its manifest "
                f"{shard.samples} samples: the shard cannot be rewritten without losing a sample"
            )
        ranges = None


def _counts(shards: pa.ChunkedArray | pa.Array) -> dict[str, int]:
    values, counts = (part.to_pylist() for part in pc.value_counts(shards).flatten())
    return dict(zip(values, counts))


def rewrite_shards(
    version: Version,
    plan: ChangePlan,
    threads: int,
    renew: Callable[[], None] = lambda: None,
    sha256: bool | None = None,
) -> dict[str, ShardEntry]:
    """Stage every rewrite of the plan, `threads` at a time; the new entries by name. `renew` is
    called after every read (the commit's lease: a large shard's copy outlasts no lease). `sha256`:
    the new version's checksum setting (option checksum=sha256) says whether each entry carries a
    sha256, as the version's written shards do; None (a manifest older than the option): as its source."""
    if not plan.rewrites:
        return {}
    written: dict[str, ShardEntry] = {}
    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="webdataset-rewrite") as pool:
        for entry in pool.map(lambda rewrite: rewrite_shard(version, rewrite, renew, sha256), plan.rewrites):
            written[entry.name] = entry
    log.info(
        "webdataset: rewrote %d shard(s) without their replaced or deleted samples (%d samples copied)",
        len(plan.rewrites), sum(len(rewrite.kept) for rewrite in plan.rewrites),
    )  # fmt: skip
    return written


def _runs(kept: pa.Table) -> Iterator[tuple[int, int, int, int]]:
    """(first row, end row, offset, bytes) of each run of adjacent kept samples, at most READ_BYTES
    a run (unless one sample is larger)."""
    offsets = kept.column("offset").to_pylist()
    lengths = kept.column("length").to_pylist()
    start = 0
    for row in range(1, len(offsets) + 1):
        run_bytes = offsets[row - 1] + lengths[row - 1] - offsets[start]
        if (
            row == len(offsets)
            or offsets[row] != offsets[row - 1] + lengths[row - 1]
            or run_bytes + lengths[row] > READ_BYTES
        ):
            yield start, row, offsets[start], run_bytes
            start = row


def rewrite_shard(
    version: Version, rewrite: Rewrite, renew: Callable[[], None] = lambda: None, sha256: bool | None = None
) -> ShardEntry:
    """Copy the kept samples' bytes into the staged shard, each checked against its crc32c in the
    index (a sample that changed since is not copied into a new shard); its manifest entry."""
    storage = version.storage
    source = rewrite.source
    keys = rewrite.kept.column("key").to_pylist()
    lengths = rewrite.kept.column("length").to_pylist()
    crcs = rewrite.kept.column("crc32c").to_pylist()
    digests = Digests()
    size = 0
    with storage.open_write(rewrite.staged) as sink:
        for start, end, offset, length in _runs(rewrite.kept):
            data = storage.read_range(rewrite.source_uri, offset, length)
            renew()
            view = memoryview(data)
            at = 0
            for row in range(start, end):
                sample = view[at : at + lengths[row]]
                if len(sample) != lengths[row] or crc32c_extend(0, sample) != crcs[row]:
                    raise ChecksumMismatch(
                        f"{rewrite.source_uri} (shard {source.name} of version {source.version or version.id}): "
                        f"sample {keys[row]!r} at offset {offset + at} does not match its crc32c in the index; "
                        "the shard changed after it was published, so it is not copied into a new one"
                    )
                at += lengths[row]
            sink.write(data)
            digests.update(data)
            size += length
        sink.write(END_OF_ARCHIVE)
        digests.update(END_OF_ARCHIVE)
        size += len(END_OF_ARCHIVE)
    return ShardEntry(
        name=rewrite.name,
        samples=len(keys),
        bytes=size,
        first_key=keys[0],
        last_key=keys[-1],
        crc32c=digests.crc32c,
        sha256=digests.sha256 if (source.sha256 is not None if sha256 is None else sha256) else None,
        keys_ascending=source.keys_ascending,
    )
