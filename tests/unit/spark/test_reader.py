"""The reader's planning and tasks called directly, no SparkSession: a key-only schema reads no payload.
Through `spark.read.format("webdataset")`: tests/integration/test_spark_reader.py.
"""

from __future__ import annotations

import io

from spark_webdataset.spark.options import ReadOptions
from spark_webdataset.spark.reader import ShardPartition, WebDatasetReader


class CountingStream(io.BufferedReader):
    """Adds every byte read through it, by any read method, to its own test's `counted` list."""

    def __init__(self, raw, counted: list[int]) -> None:
        super().__init__(raw)
        self.counted = counted

    def read(self, size=-1):
        data = super().read(size)
        self.counted.append(len(data))
        return data

    def read1(self, size=-1):
        data = super().read1(size)
        self.counted.append(len(data))
        return data

    def readinto(self, buffer):
        count = super().readinto(buffer)
        self.counted.append(count or 0)
        return count

    def readinto1(self, buffer):
        count = super().readinto1(buffer)
        self.counted.append(count or 0)
        return count


def test_key_only_schema_reads_no_payload(tmp_path, monkeypatch) -> None:
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_webdataset.format.encode import encode_column
    from spark_webdataset.format.shard_writer import ShardWriter

    path = tmp_path / "shard.tar"
    writer = ShardWriter(["bin"], lambda _: open(path, "wb"), max_shard_bytes=1 << 30)
    writer.write_batch(
        pa.array([f"k{i}" for i in range(200)]), [encode_column(pa.array([b"z" * 100_000] * 200), "bin")]
    )
    writer.close()
    from spark_webdataset.storage.local import LocalStorage

    counted: list[int] = []  # this test's own count: nothing carried over from another test or run
    monkeypatch.setattr(LocalStorage, "open_read", lambda self, p: CountingStream(io.FileIO(p), counted))
    schema = StructType([StructField("__key__", StringType())])
    reader = WebDatasetReader(ReadOptions(str(path)), schema)
    keys = [key for batch in reader.read(ShardPartition(str(path), 0)) for key in batch.column(0).to_pylist()]
    assert keys == [f"k{i}" for i in range(200)]
    # every header was read through the stream, payloads were seeked over
    assert 200 * 512 <= sum(counted) < 200 * 512 * 2, sum(counted)
    assert path.stat().st_size > 200 * 100_000


def _digits_version(tmp_path):
    from tests.support.webdataset_ui_data import commit_table, digits_table

    return commit_table(tmp_path / "root", "v1", digits_table().slice(0, 300), max_shard_bytes=64 * 1024)


def _rows(reader: WebDatasetReader) -> list[tuple[str, int]]:
    return [
        (key, partition.index)
        for partition in reader.partitions()
        for batch in reader.read(partition)
        for key in batch.column(0).to_pylist()
    ]


def test_key_options_read_only_the_indexed_samples_in_runs_or_streamed(tmp_path, monkeypatch) -> None:
    """The index picks the shards and the samples; adjacent ones are one ranged read, or one stream
    when the run is longer than SPAN_READ_BYTES (here made small to take that path too)."""
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from spark_webdataset.spark import reader as reader_module
    from spark_webdataset.storage.local import LocalStorage

    version = _digits_version(tmp_path)
    schema = StructType([StructField("__key__", StringType()), StructField("png", BinaryType())])
    ranges: list[tuple[str, int]] = []
    real = LocalStorage.read_range
    monkeypatch.setattr(LocalStorage, "read_range", lambda self, p, o, n: ranges.append((p, n)) or real(self, p, o, n))
    few = WebDatasetReader(ReadOptions(str(version), keys=reader_module.KeyRange("00010", "00013")), schema)
    assert [key for key, _ in _rows(few)] == ["00010", "00011", "00012", "00013"]
    assert len(few.partitions()) == 1 and few.partitions()[0].samples is not None
    shard_reads = [n for path, n in ranges if path.endswith(".tar")]
    assert len(shard_reads) == 1  # four adjacent samples: one read of their bytes
    monkeypatch.setattr(reader_module, "SPAN_READ_BYTES", 512)  # every run streamed
    streamed = WebDatasetReader(ReadOptions(str(version), keys=reader_module.KeyRange(prefix="0002")), schema)
    assert [key for key, _ in _rows(streamed)] == [f"{n:05d}" for n in range(20, 30)]
    nothing = WebDatasetReader(ReadOptions(str(version), keys=reader_module.KeyRange("99990", "99999")), schema)
    assert nothing.partitions() == [] and _rows(nothing) == []


def test_samples_that_are_not_where_the_index_says_fail_the_read(tmp_path) -> None:
    import pytest
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_webdataset.errors import ManifestChanged
    from spark_webdataset.spark.reader import KeyRange

    version = _digits_version(tmp_path)
    reader = WebDatasetReader(
        ReadOptions(str(version), keys=KeyRange("00010", "00011")), StructType([StructField("__key__", StringType())])
    )
    (partition,) = reader.partitions()
    offset, length, key, crc = partition.samples[0]
    moved = ShardPartition(partition.url, partition.index, partition.expected, [(offset + length, length, key, crc)])
    with pytest.raises(ManifestChanged, match="crc32c differs from the index's"):  # checked before it is parsed
        list(reader.read(moved))
