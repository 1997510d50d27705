"""What validation proves of a version's sample index, and at what cost.

The index's rows of the shards a version stores are compared with the rows its tars hold
(`compare_index`). What a child reads through its ancestors' layers is proven one of two ways:

* **from the change** (O(change), plus the layers it folded): when the parent's validation report
  proves the parent's current manifest and recorded the storage identity of every index file the
  child still reads (so none changed since it was verified), the child's own file must hold its own
  shards' rows (compared with its tars), and for the shards it references exactly the live rows of
  the parent's files it folded; its own keys must be absent from the layers it keeps (only the blocks
  those keys fall in are read). Every referenced shard must be one the parent lists with the same
  samples and crc32c: the parent proved each such shard's rows, and the child sees the same rows.
* **from every live row** otherwise (no parent, an older report, a copied root, `--full`): every
  layer's live rows merged, each key once, and each shard's count against the manifest.

The report records which proof ran (`sample_index_check`) and the identities it relied on
(`sample_index_files`): the next child's proof starts from them.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptManifest
from ..format.manifest import Manifest
from ..format.sample_index import index_block_rows
from ..storage import storage_for
from ..storage.base import StoredObject
from .index_layers import IndexPart, index_file_names, index_parts, locations, merged_live_rows, part_rows
from .index_merge import layer_rows_near

if TYPE_CHECKING:
    from .layout import Version

# (version that stores it, path in that version) -> what the listing said of the file (None: absent)
IndexFiles = dict[tuple[str, str], StoredObject | None]
# The sample index's rows, a block at a time (None: the version has no index to check).
IndexRows = Callable[[], Iterator[pa.RecordBatch]] | None


def identity_json(value: object) -> object:
    """A storage identity as a report stores it (a tuple becomes a list)."""
    return json.loads(json.dumps(value))


def index_files(version: Version, manifest: Manifest) -> IndexFiles:
    """The listing of every index file the version reads (one listing a directory). Taken before a byte
    is read: a file rewritten while (or after) it is checked gets another identity than the one
    recorded, so whoever trusts the report reads it again. Empty if the manifest names no index or
    its layers are malformed (check_index_counts reports that)."""
    if not manifest.sample_index:
        return {}
    try:
        parts = index_parts(version, manifest)
    except CorruptManifest:
        return {}
    listings: dict[str, dict[str, StoredObject]] = {}
    found: IndexFiles = {}
    for name, part in zip(index_file_names(version.name, manifest), parts):
        directory, file = part.uri.rsplit("/", 1)
        if directory not in listings:
            listings[directory] = storage_for(part.uri).objects(directory)
        found[name] = listings[directory].get(file)
    return found


def report_entries(files: IndexFiles) -> list[dict]:
    """`files` as a validation report records them (`sample_index_files`)."""
    return [
        {"version": version, "path": path, "bytes": None if found is None else found.size,
         "identity": None if found is None else identity_json(found.identity)}
        for (version, path), found in files.items()
    ]  # fmt: skip


def compare_index(
    index: Iterable[pa.RecordBatch], scanned: Iterable[pa.RecordBatch], against: str = "the shards"
) -> list[str]:
    """What the sample index gets wrong against `scanned` (by default the samples the tars hold); both
    sorted by key, with columns key, shard, offset, length. The first disagreement is reported (after
    one sample too many or too few, every later row differs too)."""
    left, right = _Cursor(index), _Cursor(scanned)
    position = 0
    while True:
        a, b = left.head(), right.head()
        if a is None and b is None:
            return []
        if a is None or b is None:
            extra = _describe((a if b is None else b).slice(0, 1))
            if b is None:
                return [
                    f"the sample index lists {extra} after its {position} matching samples, but {against} do not hold it"
                ]
            return [f"the sample index has {position} samples, but {against} hold more: {extra} is not in it"]
        count = min(len(a), len(b))
        a, b = a.slice(0, count), b.slice(0, count)
        same = pc.and_(
            pc.and_(pc.equal(a.column(0).cast(pa.large_string()), b.column(0).cast(pa.large_string())),
                    pc.equal(a.column(1).cast(pa.string()), b.column(1).cast(pa.string()))),
            pc.and_(pc.equal(a.column(2), b.column(2)), pc.equal(a.column(3), b.column(3))),
        )  # fmt: skip
        if not pc.all(same).as_py():
            row = pc.index(same, False).as_py()
            return [
                f"sample index row {position + row}: it has {_describe(a.slice(row, 1))}, "
                f"{against} have {_describe(b.slice(row, 1))}"
            ]
        left.take(count)
        right.take(count)
        position += count


class _Cursor:
    """Rows of a stream of batches (key, shard, offset, length first), taken in any counts."""

    def __init__(self, batches: Iterable[pa.RecordBatch]) -> None:
        self._batches = iter(batches)
        self._head: pa.RecordBatch | None = None

    def head(self) -> pa.RecordBatch | None:
        while self._head is None or not len(self._head):
            batch = next(self._batches, None)
            if batch is None:
                return None
            self._head = pa.record_batch(
                [batch.column(at) for at in range(4)], names=["key", "shard", "offset", "length"]
            )
        return self._head

    def take(self, count: int) -> None:
        assert self._head is not None
        self._head = self._head.slice(count)


def _describe(row: pa.RecordBatch) -> str:
    key, shard, offset, length = (row.column(at)[0].as_py() for at in range(4))
    return f"sample {key!r} in {shard} at offset {offset} ({length} bytes)"


def check_index(
    index: IndexRows, scanned: Callable[[], Iterable[pa.RecordBatch]], duplicates: int, results: list[dict]
) -> list[str]:
    """The index against the tars' rows (key, shard, offset, length, sorted by key), once the shards are sound."""
    if index is None:
        return []
    if duplicates or any(result["errors"] for result in results):
        return []  # the shards are wrong already: the index cannot be proven against them
    try:
        return compare_index(index(), scanned())
    except Exception as error:  # noqa: BLE001 - an unreadable index is an error of the report
        return [f"the sample index could not be read: {type(error).__name__}: {error}"]


@dataclass(frozen=True)
class ParentProof:
    """What a child's index proof starts from: the parent's files it folded into its own file, and the
    ancestor files it still reads (verified by the parent's validation and unchanged since)."""

    parent: str
    folded: list[IndexPart]
    kept: list[IndexPart]


def check_index_counts(version: Version, manifest: Manifest, files: IndexFiles, full: bool) -> tuple[list[str], str]:
    """Across all the shards of a child version (its own and referenced): every key once among its live
    rows, and each shard's rows as its manifest entry says; each ancestor layer file the size the
    manifest says. From the change when the parent's validation allows it (see the module's
    docstring), else from every live row. Returns the problems and how the index was proven."""
    assert manifest.sample_index is not None
    try:
        parts = index_parts(version, manifest)
    except CorruptManifest as error:
        return [str(error)], "not proven: the manifest's layers are malformed"
    problems = _check_layer_sizes(version, manifest, parts[1:], files)
    if problems:
        return problems, "not proven: a layer file changed"
    if not full:
        proof = parent_proof(version, manifest, parts, files)
        if isinstance(proof, ParentProof):
            return _check_change(manifest, parts[0], proof), f"from the change over version {proof.parent}"
        how = f"from every live row ({proof})"
    else:
        how = "from every live row (--full)"
    return _check_every_live_row(version, manifest, parts), how


def _check_layer_sizes(version: Version, manifest: Manifest, layers: list[IndexPart], files: IndexFiles) -> list[str]:
    """Each ancestor's index file the version reads through is on storage with the bytes its manifest
    says (as a referenced shard's size is checked)."""
    problems = []
    for name, part in zip(index_file_names(version.name, manifest)[1:], layers):
        found = files.get(name)
        size = None if found is None else found.size
        if size != part.bytes:
            problems.append(
                f"the sample index layer {part.uri} of version {part.stored_in} is {size} bytes on storage, "
                f"the manifest says {part.bytes}: it changed after it was published"
            )
    return problems


def parent_proof(version: Version, manifest: Manifest, parts: list[IndexPart], files: IndexFiles) -> ParentProof | str:
    """The parent's proof a child's index check can start from, or why there is none."""
    parent_id = manifest.parent
    if parent_id is None or version.dataset is None:
        return "no parent in a dataset root"
    holder = version.dataset.version(parent_id)
    data, _ = holder.read_manifest_bytes()
    if data is None:
        return f"parent {parent_id} has no manifest"
    parent = Manifest.from_json(data)
    if not parent.sample_index:
        return f"parent {parent_id} has no sample index"
    validation = holder.read_validation() or {}
    if validation.get("ok") is not True or validation.get("manifest_sha256") != hashlib.sha256(data).hexdigest():
        return f"parent {parent_id}'s validation report does not prove its current manifest"
    recorded = {
        (entry.get("version"), entry.get("path")): entry for entry in validation.get("sample_index_files") or []
    }
    parent_names = index_file_names(parent_id, parent)
    kept_names = index_file_names(version.name, manifest)[1:]
    folded = len(parent_names) - len(kept_names)
    if folded < 0 or parent_names[folded:] != kept_names:
        return f"its index layers are not the nearest files of parent {parent_id}'s index"
    for name in kept_names:
        entry, found = recorded.get(name), files.get(name)
        if (
            entry is None
            or found is None
            or entry.get("identity") is None
            or entry.get("identity") != identity_json(found.identity)
            or entry.get("bytes") != found.size
        ):
            return f"index file {name[1]} of version {name[0]} is not the one parent {parent_id}'s validation verified"
    listed = {shard.referenced_from(parent_id).location: shard for shard in parent.shards}
    for shard in manifest.shards:
        if shard.version is None:
            continue
        was = listed.get(shard.location)
        if was is None or (was.samples, was.crc32c) != (shard.samples, shard.crc32c):
            return f"referenced shard {shard.location} is not one parent {parent_id} lists as it is"
    return ParentProof(parent_id, index_parts(version, parent, stored_in=parent_id)[:folded], parts[1:])


def _check_change(manifest: Manifest, own: IndexPart, proof: ParentProof) -> list[str]:
    """The child's own file in key order, once each; its rows of referenced shards exactly the folded
    files' live rows; its own shards' keys absent from the live rows of every layer it keeps."""
    listed = locations(manifest)
    problems: list[str] = []
    own_keys: list[pa.Array] = []
    previous: list[str] = []

    def referenced_rows() -> Iterator[pa.RecordBatch]:
        for batch in part_rows(own):
            order = _order_problem(batch.column(0), previous)
            if order:
                problems.append(order)
                return
            stored_here = pc.invert(pc.starts_with(batch.column(1), "../"))
            own_keys.append(batch.column(0).filter(stored_here))
            yield batch.filter(pc.invert(stored_here))

    try:
        folded = compare_index(
            referenced_rows(), merged_live_rows(proof.folded, listed), "the parent's folded index files"
        )
    except Exception as error:  # noqa: BLE001 - an unreadable index is an error of the report
        return [f"the sample index could not be read: {type(error).__name__}: {error}"]
    if problems or folded:
        return problems or [f"the sample index's rows of referenced shards: {folded[0]}"]
    keys = pa.concat_arrays([keys.cast(pa.string()) for keys in own_keys]) if own_keys else pa.array([], pa.string())
    for part in proof.kept:
        try:
            for batch in layer_rows_near(part, listed, keys):  # only rows of the own keys: each a duplicate
                if len(batch):
                    key, shard = (batch.column(at)[0].as_py() for at in range(2))
                    return [
                        f"key {key!r} of a shard this version stores is also live in {shard} "
                        f"(the index layer of version {part.stored_in}): keys must be unique across the version"
                    ]
        except Exception as error:  # noqa: BLE001
            return [f"the sample index layer {part.uri} could not be read: {type(error).__name__}: {error}"]
    return []


def _order_problem(keys: pa.Array, previous: list[str]) -> str | None:
    """Why a block's keys do not follow `previous` (the last key so far, updated) in strict order."""
    if len(keys) and previous and keys[0].as_py() <= previous[0]:
        return f"the sample index repeats or misorders key {keys[0].as_py()!r}"
    if len(keys) > 1 and not pc.all(pc.greater(keys[1:], keys[:-1])).as_py():
        return "the sample index repeats or misorders a key within a block"
    if len(keys):
        previous[:] = [keys[len(keys) - 1].as_py()]
    return None


def _check_every_live_row(version: Version, manifest: Manifest, parts: list[IndexPart]) -> list[str]:
    """Every live row of every layer merged: each key once, each shard's count against the manifest."""
    counts: collections.Counter[str] = collections.Counter()
    previous: list[str] = []
    problems: list[str] = []
    with contextlib.ExitStack() as stack:
        if manifest.sample_index_layers:
            rows: Iterator[pa.RecordBatch] = merged_live_rows(parts, locations(manifest))
        else:
            rows = index_block_rows(stack.enter_context(version.storage.open_read(version.path(manifest.sample_index))))  # type: ignore[arg-type]
        for batch in rows:
            order = _order_problem(batch.column("key"), previous)
            if order:
                return [order]
            values, found = (part.to_pylist() for part in pc.value_counts(batch.column("shard")).flatten())
            counts.update(dict(zip(values, found)))
    for shard in manifest.shards:
        if counts.get(shard.location, 0) != shard.samples:
            problems.append(
                f"the sample index has {counts.get(shard.location, 0)} samples of {shard.location}, the manifest {shard.samples}"
            )
    return problems
