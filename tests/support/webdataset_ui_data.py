"""Dataset roots for the WebDataset view's tests, built without Spark.

Shards come from the real ShardWriter, the manifest from the real Manifest
(crc32c as the writer computed it), then the real validate_version and
publish run on them, as a DAG run leaves a version.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.tree import WRITER_MARK, WRITER_MARK_NAME, sample_index_path, shard_name
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.format.encode import encode_column
from spark_webdataset.format.keys import sort_run
from spark_webdataset.format.manifest import Manifest, ShardEntry
from spark_webdataset.format.sample_index import TASK_SCHEMA, concat_rows, named_rows, write_index
from spark_webdataset.format.shard_writer import ShardWriter
from tests.support.dataset_dags import write_config

DIGITS_FIELDS = [("png", "image", "binary"), ("cls", "label", "bigint"), ("json", "meta", "struct")]


def digits_table() -> pa.Table:
    from spark_webdataset.jobs.demo import digits_table as table

    return table()


def commit_table(
    root: Path | str, version: str, table: pa.Table, fields=DIGITS_FIELDS, max_shard_bytes: int = 256 * 1024
) -> Path:
    """Write `table` (`id` gives the key) as one committed version under root/versions/version."""
    directory = Path(root) / "versions" / version
    directory.mkdir(parents=True)
    (directory / WRITER_MARK_NAME).write_bytes(WRITER_MARK)
    writer = ShardWriter(
        [f for f, _, _ in fields], lambda index: open(directory / shard_name(index), "wb"), max_shard_bytes
    )
    keys = pa.array([f"{i:05d}" for i in table.column("id").to_pylist()])
    writer.write_batch(keys, [encode_column(table.column(column).combine_chunks(), f) for f, column, _ in fields])
    infos = writer.close()
    shards = [
        ShardEntry(shard_name(i.sequence), i.samples, i.bytes, i.first_key, i.last_key, crc32c=i.crc32c) for i in infos
    ]
    rows, _ = sort_run(concat_rows(writer.index_rows, TASK_SCHEMA))
    (directory / "_index").mkdir()
    write_index([named_rows(rows, pa.array([shard.name for shard in shards]))], str(directory / sample_index_path(0)))
    manifest = Manifest(
        shards=shards,
        fields=[{"name": f, "type": t} for f, _, t in fields],
        options={"maxShardBytes": max_shard_bytes},
        sample_index=sample_index_path(0),
        sample_index_bytes=(directory / sample_index_path(0)).stat().st_size,
    )
    (directory / "_manifest.json").write_bytes(manifest.to_json())
    return directory


def published_digits(root: Path | str, version: str = "20261201T000000Z", table: pa.Table | None = None) -> Path:
    """The digits, committed, validated (one worker) and published: LATEST points at it."""
    directory = commit_table(root, version, digits_table() if table is None else table)
    report = validate_version(str(directory), workers=1)
    assert report.ok, report.summary()
    publish(str(root), version)
    assert Dataset(str(root)).read_latest() == version
    return directory


def write_digits_config(folder: Path, name: str, root: Path | str) -> Path:
    """<folder>/<name>.yaml: the digits' fields (png, cls, json) keyed by id, rooted at `root`, no schedule."""
    return write_config(
        folder,
        name,
        name=name,
        source=f"{folder}/source-{name}",
        source_format="parquet",
        root=str(root),
        key="id",
        fields={"png": "image", "cls": "label", "json": "meta"},
        schedule=None,
    )
