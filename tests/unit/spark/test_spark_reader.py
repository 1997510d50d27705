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
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_webdataset.format.encode import encode_column
    from spark_webdataset.format.shard_writer import ShardWriter
    import pyarrow as pa

    path = tmp_path / "shard.tar"
    writer = ShardWriter(["bin"], lambda _: open(path, "wb"), max_shard_bytes=1 << 30)
    writer.write_batch(pa.array([f"k{i}" for i in range(200)]), [encode_column(pa.array([b"z" * 100_000] * 200), "bin")])
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
