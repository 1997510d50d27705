"""Chains of published versions with parents, built without Spark (fast: unit tests and gc's).

The shards come from the real ShardWriter, the sample index from the real index writer, the manifest
from the real Manifest, then the real validate_version and publish run on each version: a child
references its parent's shards (`"version": "<id>"` entries, numbered first) and stores only its new
samples, as the data source's `parent` option leaves it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.tree import WRITER_MARK, sample_index_path, shard_name
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.format.encode import encode_column
from spark_webdataset.format.keys import sort_run
from spark_webdataset.format.manifest import Manifest, ShardEntry
from spark_webdataset.format.sample_index import (
    INDEX_SCHEMA,
    TASK_SCHEMA,
    concat_rows,
    named_rows,
    read_index,
    write_index,
)
from spark_webdataset.format.shard_writer import ShardWriter
from spark_webdataset.storage import storage_for

FIELDS = [("bin", "payload", "binary"), ("cls", "label", "bigint")]
SHARD_BYTES = 16 * 1024


def rows(start: int, count: int) -> pa.Table:
    """`count` samples with keys start..start+count-1: ~1 KiB of bytes each and a label."""
    ids = list(range(start, start + count))
    payload = [hashlib.sha256(str(i).encode()).digest() * 32 for i in ids]
    return pa.table({"id": ids, "payload": pa.array(payload, pa.binary()), "label": [i % 10 for i in ids]})


def _write(root: str, version: str, table: pa.Table, first: int) -> tuple[str, list[ShardEntry], pa.RecordBatch]:
    """The table's shards, numbered from `first`, in root/versions/version; their entries and index rows."""
    storage = storage_for(root)
    dataset = Dataset(root)
    target = dataset.version(version)
    storage.write_atomic(target.mark_uri, WRITER_MARK)
    local = "://" not in root
    if local:
        os.makedirs(target.uri, exist_ok=True)
    writer = ShardWriter(
        [f for f, _, _ in FIELDS], lambda index: storage.open_write(target.shard_uri(first + index)), SHARD_BYTES
    )
    keys = pa.array([f"{i:06d}" for i in table.column("id").to_pylist()])
    writer.write_batch(keys, [encode_column(table.column(column).combine_chunks(), f) for f, column, _ in FIELDS])
    infos = writer.close()
    shards = [
        ShardEntry(shard_name(first + i.sequence), i.samples, i.bytes, i.first_key, i.last_key, crc32c=i.crc32c)
        for i in infos
    ]
    task_rows, _ = sort_run(concat_rows(writer.index_rows, TASK_SCHEMA))
    return target.uri, shards, named_rows(task_rows, pa.array([shard.name for shard in shards]))


def _commit(
    root: str, version: str, shards: list[ShardEntry], index: pa.RecordBatch | pa.Table, parent: str | None
) -> None:
    storage = storage_for(root)
    target = Dataset(root).version(version)
    index_uri = target.path(sample_index_path(0))
    if "://" not in root:
        os.makedirs(os.path.dirname(index_uri), exist_ok=True)
    table = pa.Table.from_batches([index]) if isinstance(index, pa.RecordBatch) else index
    table = table.cast(INDEX_SCHEMA).sort_by("key")
    with storage.open_write(index_uri) as sink:
        write_index(table.to_batches(), sink)
    manifest = Manifest(
        shards=shards,
        fields=[{"name": f, "type": t} for f, _, t in FIELDS],
        options={"maxShardBytes": SHARD_BYTES},
        sample_index=sample_index_path(0),
        sample_index_bytes=storage.list_sizes(target.sample_index_dir_uri)[sample_index_path(0).split("/")[-1]],
        parent=parent,
    )
    storage.write_atomic(target.manifest_uri, manifest.to_json())


def commit_version(root: str, version: str, start: int, count: int, parent: str | None = None) -> None:
    """Commit (not validate, not publish) samples start..start+count-1 as `version`, built on the
    published `parent` (its shards referenced, never copied) when given."""
    root = str(root)
    referenced: list[ShardEntry] = []
    parent_rows = None
    if parent is not None:
        parent_version, parent_manifest = Dataset(root).published(parent)
        referenced = [shard.referenced_from(parent) for shard in parent_manifest.shards]
        parent_rows = read_index(parent_version.storage.read_bytes(parent_version.path(parent_manifest.sample_index)))
        shards = parent_rows.column("shard")
        own = pc.invert(pc.starts_with(shards, "../"))
        parent_rows = parent_rows.set_column(
            1, "shard", pc.if_else(own, pc.binary_join_element_wise(f"../{parent}/", shards, ""), shards)
        )
    _, own_shards, own_rows = _write(root, version, rows(start, count), len(referenced))
    index = pa.Table.from_batches([own_rows]).cast(INDEX_SCHEMA)
    if parent_rows is not None:
        index = pa.concat_tables([parent_rows.cast(INDEX_SCHEMA), index])
    _commit(root, version, referenced + own_shards, index, parent)


def publish_version(
    root: str, version: str, start: int, count: int, parent: str | None = None, logical_date: str | None = None
) -> None:
    """Commit, validate (one worker: must pass) and publish `version`."""
    root = str(root)
    commit_version(root, version, start, count, parent)
    report = validate_version(Dataset(root).version(version).uri, workers=1, progress=False)
    assert report.ok, report.summary()
    publish(root, version, logical_date=logical_date)


def build_chain(root: Path | str, ids: list[str], per_version: int = 40) -> None:
    """Published versions `ids` in order, each built on the one before (the first has no parent);
    logical dates a day apart, so LATEST is the last."""
    parent = None
    for day, version in enumerate(ids):
        publish_version(
            str(root), version, day * per_version, per_version, parent, logical_date=f"2026-11-{day + 1:02d}T00:00:00Z"
        )
        parent = version
