"""The Spark reader's checks, each where a one-line bug in it went unseen by the rest of the suite
(issue 29's mutation table re-run: the mutation each test catches is named in it).

Real versions from the real ShardWriter and index writer, a real Spark session; the damage is
done to the files as a broken disk or a hostile user would (mtime put back where it matters).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

import spark_webdataset
from spark_webdataset.errors import ChecksumMismatch, CorruptIndex, SampleMismatch, from_spark
from tests.support.webdataset_ui_data import commit_table
from tests.unit.format.test_sample_index_damage import index_path, rewrite_rows, set_row


def _version(root: Path, samples: int = 50) -> Path:
    """An unpublished version (its index may be rewritten) of small samples in 8 KiB shards."""
    table = pa.table({"id": list(range(samples)), "txt": [f"text {i} ".encode() * (i % 9 + 1) for i in range(samples)]})
    return commit_table(root, "v1", table, fields=[("txt", "txt", "binary")], max_shard_bytes=8192)


def _read(spark, version: Path, **options: str):
    return spark.read.format("webdataset").schema("__key__ string, txt binary").options(**options).load(str(version))


def _typed(action):
    with pytest.raises(Exception) as caught:
        action()
    return from_spark(caught.value), caught.value


def _keep_mtime(path: Path, data: bytes) -> None:
    before = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


# spark/reader.py selected_samples: `if after[0] < before[0] + before[1]` -> `if after[0] < before[0]`


def test_a_key_range_read_over_two_index_rows_on_the_same_bytes_is_corrupt_index_naming_the_overlap(
    spark, tmp_path: Path
) -> None:
    version = _version(tmp_path / "root")
    seventh = spark_webdataset.open(str(version)).locate("00007")
    assert spark_webdataset.open(str(version)).locate("00008").shard == seventh.shard
    rewrite_rows(version, set_row("00008", offset=seventh.offset, length=seventh.length, crc32c=seventh.crc32c))
    error, raw = _typed(lambda: _read(spark, version, keyMin="00006", keyMax="00009").collect())
    assert isinstance(error, CorruptIndex), raw
    assert "overlap" in str(error) and "'00007'" in str(error) and "'00008'" in str(error)
    assert index_path(version).name in str(error)


# spark/reader.py selected_samples: `entry = check_entry(Entry(*row), sizes, index.name)` -> `entry = Entry(*row)`
# (test_reader_checks' row of length 2**40 is still caught there, by the overlap check with the next
# row; a range of that one row is not)


@pytest.mark.parametrize("damage", [{"length": 2**40}, {"offset": 2**40}], ids=["length", "offset"])
def test_a_key_range_read_of_one_row_out_of_its_shard_is_corrupt_index_naming_it(spark, tmp_path: Path, damage) -> None:
    version = _version(tmp_path / "root")
    rewrite_rows(version, set_row("00007", **damage))
    error, raw = _typed(lambda: _read(spark, version, keyMin="00007", keyMax="00007").collect())
    assert isinstance(error, CorruptIndex), raw
    assert "'00007'" in str(error) and index_path(version).name in str(error)


# spark/reader.py _SampleChecks.finish: `if self.at < len(self.run)` -> `if self.at < len(self.run) - 1`


def test_a_key_range_read_of_a_sample_the_shard_was_cut_inside_is_a_sample_mismatch_naming_it(
    spark, tmp_path: Path
) -> None:
    version = _version(tmp_path / "root")
    entry = spark_webdataset.open(str(version)).locate("00017")
    shard = version / entry.shard
    _keep_mtime(shard, shard.read_bytes()[: entry.offset + 512 + 3])  # its header and 3 payload bytes left
    error, raw = _typed(lambda: _read(spark, version, keyMin="00017", keyMax="00017").collect())
    assert isinstance(error, SampleMismatch), raw
    assert "'00017'" in str(error)


def _one_sample_shard_of(root: Path, total: int) -> Path:
    """A version of one sample whose shard is exactly `total` bytes (a multiple of 512)."""
    probe = commit_table(
        root.parent / "probe", "v1", pa.table({"id": [0], "txt": [b"x"]}), fields=[("txt", "txt", "binary")]
    )
    overhead = (probe / "shard-000000.tar").stat().st_size - 512  # headers and end blocks around one block of payload
    payload = b"y" * (total - overhead)
    version = commit_table(root, "v1", pa.table({"id": [0], "txt": [payload]}), fields=[("txt", "txt", "binary")],
                           max_shard_bytes=2 * total)  # fmt: skip
    assert (version / "shard-000000.tar").stat().st_size == total
    return version


# spark/reader.py _batches: the `stream.finish()` after the parser's last batch removed. The parser
# reads a chunk at a time, so it reads past the archive's end (and the checksum with it) unless the
# shard ends exactly where a chunk does: what follows then is read by `finish()` alone.


def test_a_shard_of_exactly_one_parse_chunk_with_bytes_appended_is_a_checksum_mismatch(spark, tmp_path: Path) -> None:
    from spark_webdataset.format.fast_read import CHUNK_BYTES

    version = _one_sample_shard_of(tmp_path / "root", CHUNK_BYTES)
    shard = version / "shard-000000.tar"
    assert [r["__key__"] for r in _read(spark, version).collect()] == ["00000"]
    _keep_mtime(shard, shard.read_bytes() + b"appended after the end of the archive")
    error, raw = _typed(lambda: _read(spark, version).collect())
    assert isinstance(error, ChecksumMismatch), raw
    assert shard.name in str(error) and str(version) in str(error)
