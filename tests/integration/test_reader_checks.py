"""The Spark reader returns only checked bytes (docs/DESIGN: "Every byte a reader returns was checked").

A published version from the real ShardWriter and index writer; then a payload byte flipped in a
shard (its mtime put back), or its sample index damaged. A whole-shard read must fail with
ChecksumMismatch naming shard and version, a key-range read of the tampered sample with
SampleMismatch, a key-range read over a damaged index with CorruptIndex naming the index file,
each typed by `from_spark` from what Spark raises. Plain tars without a manifest have nothing to
be checked against and read as they are.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import spark_webdataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import ChecksumMismatch, CorruptIndex, SampleMismatch, from_spark
from tests.support.webdataset_ui_data import commit_table

SAMPLES = 300


def _published(root: Path) -> Path:
    table = pa.table(
        {"id": list(range(SAMPLES)), "txt": [f"text {i} ".encode() * (i % 23 + 1) for i in range(SAMPLES)]}
    )
    version = commit_table(root, "v1", table, fields=[("txt", "txt", "binary")], max_shard_bytes=32 * 1024)
    assert validate_version(str(version), workers=1).ok
    publish(str(root), "v1")
    return version


def _flip(version: Path, key: str) -> tuple[Path, int]:
    """One payload byte of `key`'s sample flipped, the shard's mtime put back."""
    entry = spark_webdataset.open(str(version)).locate(key)
    shard = version / entry.shard
    before = shard.stat()
    data = bytearray(shard.read_bytes())
    data[entry.offset + 512 + 1] ^= 0x01
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    return shard, entry.offset


def _typed(action):
    with pytest.raises(Exception) as caught:
        action()
    return from_spark(caught.value), caught.value


def _read(spark, root: Path, schema: str = "__key__ string, txt binary", **options: str):
    return spark.read.format("webdataset").schema(schema).options(**options).load(str(root))


@pytest.fixture
def version(tmp_path: Path) -> Path:
    return _published(tmp_path / "root")


def test_an_intact_version_reads_back_whole_and_by_range(spark, version: Path) -> None:
    root = version.parent.parent
    rows = {r["__key__"]: r["txt"] for r in _read(spark, root).collect()}
    assert len(rows) == SAMPLES and rows["00042"] == b"text 42 " * 20
    keys_only = _read(spark, root, "__key__ string").collect()  # no payload column: every byte still read
    assert sorted(r["__key__"] for r in keys_only) == sorted(rows)
    ranged = _read(spark, root, keyMin="00040", keyMax="00044").collect()
    assert {r["__key__"]: r["txt"] for r in ranged} == {
        k: rows[k] for k in ("00040", "00041", "00042", "00043", "00044")
    }


@pytest.mark.parametrize("schema", ["__key__ string, txt binary", "__key__ string"], ids=["payloads", "keys only"])
def test_a_flipped_payload_byte_fails_the_whole_shard_read_naming_shard_and_version(
    spark, version: Path, schema
) -> None:
    root = version.parent.parent
    shard, _ = _flip(version, "00150")
    error, raw = _typed(lambda: _read(spark, root, schema).collect())
    assert isinstance(error, ChecksumMismatch), raw
    assert shard.name in str(error) and str(version) in str(error)


def test_a_flipped_byte_fails_a_key_range_read_of_that_sample(spark, version: Path) -> None:
    root = version.parent.parent
    _flip(version, "00150")
    error, raw = _typed(lambda: _read(spark, root, keyMin="00149", keyMax="00151").collect())
    assert isinstance(error, SampleMismatch), raw
    assert "'00150'" in str(error)
    # samples of the same shard that were not touched still read by range
    assert [r["__key__"] for r in _read(spark, root, keyMin="00140", keyMax="00141").collect()] == ["00140", "00141"]


def test_a_key_range_read_over_a_truncated_index_is_a_typed_error_naming_it(spark, version: Path) -> None:
    root = version.parent.parent
    index = version / json.loads((version / "_manifest.json").read_text())["sample_index"]
    data = index.read_bytes()
    index.write_bytes(data[: len(data) // 2])
    error, raw = _typed(lambda: _read(spark, root, keyMin="00100").collect())
    assert isinstance(error, CorruptIndex), raw
    assert str(index) in str(error)


def test_a_key_range_read_over_an_index_row_out_of_its_shard_is_a_typed_error(spark, tmp_path: Path) -> None:
    """An unpublished version (its manifest may be rewritten): one row's length 2**40."""
    from tests.unit.format.test_sample_index_damage import rewrite_rows, set_row

    table = pa.table({"id": list(range(50)), "txt": [b"x" * 100] * 50})
    version = commit_table(tmp_path / "root", "v1", table, fields=[("txt", "txt", "binary")], max_shard_bytes=8192)
    rewrite_rows(version, set_row("00007", length=2**40))
    error, raw = _typed(lambda: _read(spark, version, keyMin="00005", keyMax="00009").collect())
    assert isinstance(error, CorruptIndex), raw
    assert "'00007'" in str(error) and "_index" in str(error)


def test_plain_tars_without_a_manifest_read_as_they_are(spark, version: Path, tmp_path: Path) -> None:
    """Nothing to check a foreign tar against: a flipped byte reads back (as any tar reader would)."""
    _flip(version, "00150")
    plain = tmp_path / "plain"
    plain.mkdir()
    for shard in version.glob("shard-*.tar"):
        shutil.copy(shard, plain / shard.name)
    rows = {r["__key__"]: r["txt"] for r in _read(spark, plain).collect()}
    assert len(rows) == SAMPLES and rows["00150"] != b"text 150 " * 12


def test_on_gcs_a_flipped_byte_fails_whole_and_ranged_reads_and_intact_ones_pass(spark, bucket) -> None:
    """The emulator's objects: the whole-shard check over GCS's streaming reader, the ranged one over ranged GETs."""
    from spark_webdataset.storage import storage_for

    version = f"{bucket}/checks/versions/v1"
    frame = spark.range(0, 400, 1, 2).selectExpr(
        "format_string('k%05d', id) AS __key__", "repeat(cast(id AS STRING), 50) AS txt"
    )
    frame.write.format("webdataset").option("maxShardBytes", "64KiB").mode("overwrite").save(version)
    read = lambda **options: _read(spark, version, "__key__ string, txt string", **options).collect()  # noqa: E731
    assert len(read()) == 400 and [r["__key__"] for r in read(keyMin="k00200", keyMax="k00201")] == ["k00200", "k00201"]
    entry = spark_webdataset.open(version).locate("k00200")
    storage = storage_for(version)
    shard = f"{version}/{entry.shard}"
    data = bytearray(storage.read_bytes(shard))
    data[entry.offset + 512 + 3] ^= 0x01
    storage.write_atomic(shard, bytes(data))
    error, raw = _typed(read)
    assert isinstance(error, ChecksumMismatch) and entry.shard in str(error), raw
    error, raw = _typed(lambda: read(keyMin="k00200", keyMax="k00200"))
    assert isinstance(error, SampleMismatch) and "'k00200'" in str(error), raw
