"""The sample index: the writer's rows are exact on every path, and a lookup reads a few small ranges."""

from __future__ import annotations

import io
import tarfile

import pyarrow as pa
import pytest

from spark_webdataset.errors import DuplicateKey
from spark_webdataset.format.checksums import crc32c_extend
from spark_webdataset.format.keys import merge_blocks, sort_run
from spark_webdataset.format.sample_index import BLOCK_ROWS, INDEX_SCHEMA, IndexFile, concat_rows, write_index
from spark_webdataset.format.shard_writer import ShardWriter
from spark_webdataset.storage.base import RangeFile
from spark_webdataset.storage.local import LocalStorage


def _written(
    keys: list[str], columns: list[list[bytes | None]], fields: list[str], **options
) -> tuple[list[bytes], pa.RecordBatch]:
    shards: list[io.BytesIO] = []

    class Kept(io.BytesIO):
        def close(self) -> None:  # keep the bytes for the test
            pass

    def open_shard(number: int) -> io.BytesIO:
        shards.append(Kept())
        return shards[-1]

    writer = ShardWriter(fields, open_shard, **{"max_shard_bytes": 4 << 20, **options})
    writer.write_batch(pa.array(keys), [pa.array(column, pa.large_binary()) for column in columns])
    writer.close()
    return [shard.getvalue() for shard in shards], concat_rows(writer.index_rows, writer.index_rows[0].schema)


@pytest.mark.parametrize(
    "case",
    ["small members (joined)", "large members (direct writes)", "long names (PAX)", "several shards"],
)
def test_the_writers_rows_are_each_samples_bytes(case: str) -> None:
    keys = [f"key{n:04d}" for n in range(40)]
    fields = ["txt", "bin"]
    size = 50_000 if case == "large members (direct writes)" else 37
    columns = [
        [f"t{n}".encode() * (n % 5 + 1) for n in range(40)],
        [bytes([n]) * (size + n) if n % 3 else None for n in range(40)],
    ]
    options = {}
    if case == "long names (PAX)":
        keys = [f"{'k' * 120}{n:04d}" for n in range(40)]
        options["allow_pax"] = True
    if case == "several shards":
        options["max_samples_per_shard"] = 7
    shards, rows = _written(keys, columns, fields, **options)
    assert rows.column("key").to_pylist() == keys
    assert len(shards) == (6 if case == "several shards" else 1)
    for key, shard, offset, length, crc in zip(
        *(rows.column(c).to_pylist() for c in ("key", "shard", "offset", "length", "crc32c"))
    ):
        data = shards[shard]
        piece = data[offset : offset + length]
        assert crc32c_extend(0, piece) == crc
        with tarfile.open(fileobj=io.BytesIO(piece + bytes(1024))) as tar:
            names = [member.name for member in tar.getmembers()]
        n = keys.index(key)
        assert names == [f"{key}.txt"] + ([f"{key}.bin"] if n % 3 else [])


def test_a_task_run_sorts_and_a_repeated_key_is_named() -> None:
    rows = pa.record_batch([pa.array(["b", "a", "c"]), pa.array([0, 1, 2])], names=["key", "shard"])
    ordered, ascending = sort_run(rows)
    assert ordered.column(0).to_pylist() == ["a", "b", "c"] and not ascending
    assert sort_run(ordered)[1]
    with pytest.raises(DuplicateKey, match="'a'"):
        sort_run(pa.record_batch([pa.array(["a", "b", "a"]), pa.array([0, 1, 2])], names=["key", "shard"]))


def test_the_merge_carries_the_rows_columns_along() -> None:
    runs = [
        [pa.record_batch([pa.array(["a", "c"]), pa.array([1, 3])], names=["key", "v"])],
        [pa.record_batch([pa.array(["b", "d"]), pa.array([2, 4])], names=["key", "v"])],
    ]
    merged = [block for block, _ in merge_blocks(runs)]
    assert pa.Table.from_batches(merged).to_pydict() == {"key": ["a", "b", "c", "d"], "v": [1, 2, 3, 4]}


class CountingStorage(LocalStorage):
    """The real local storage, counting the ranged reads it serves."""

    def __init__(self) -> None:
        self.reads: list[int] = []

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        self.reads.append(length)
        return super().read_range(path, offset, length)


def _million(path: str) -> int:
    count = 1_000_000
    keys = pa.array([f"sample-{n:09d}" for n in range(count)], pa.string())
    shards = pa.DictionaryArray.from_arrays(
        pa.array([n // 10_000 for n in range(count)], pa.int32()), pa.array([f"shard-{s:06d}.tar" for s in range(100)])
    )
    table = pa.table(
        {
            "key": keys,
            "shard": shards.cast(pa.string()),
            "offset": pa.array([(n % 10_000) * 2048 for n in range(count)], pa.int64()),
            "length": pa.array([2048] * count, pa.int64()),
            "crc32c": pa.array([n * 2654435761 % (1 << 32) for n in range(count)], pa.uint32()),
        },
        schema=INDEX_SCHEMA,
    )
    return write_index(table.to_batches(max_chunksize=100_000), path)


def test_a_lookup_in_a_million_keys_reads_a_few_small_ranges(tmp_path) -> None:
    path = str(tmp_path / "index.parquet")
    assert _million(path) == 1_000_000
    size = (tmp_path / "index.parquet").stat().st_size
    storage = CountingStorage()
    index = IndexFile(lambda: RangeFile(storage, path, size))
    entry = index.get("sample-000654321")
    assert entry is not None and (entry.shard, entry.offset) == ("shard-000065.tar", 4321 * 2048)
    assert entry.crc32c == 654321 * 2654435761 % (1 << 32)
    assert len(storage.reads) <= 3, storage.reads  # the footer (one read, maybe two) and one block
    assert sum(storage.reads) < 512 * 1024, storage.reads  # of an index of ~MiBs
    storage.reads.clear()
    assert index.at(999_999).key == "sample-000999999"
    assert len(storage.reads) == 1 and index.get("sample-000654322") is not None and len(storage.reads) == 1
    assert index.get("sample-000654321x") is None and index.get("a") is None and index.get("z") is None
    assert len(index) == 1_000_000 and index.at(-1).key == "sample-000999999"
    assert size / 1_000_000 < 16  # bytes of index a sample
    assert BLOCK_ROWS >= 1024


def test_rows_matching_reads_only_the_blocks_where_the_keys_fall(tmp_path) -> None:
    count = 3 * BLOCK_ROWS
    keys = [f"k{i:07d}" for i in range(count)]
    table = pa.table(
        {"key": keys, "shard": ["shard-000000.tar"] * count, "offset": [512 * i for i in range(count)],
         "length": [512] * count, "crc32c": pa.array([0] * count, pa.uint32())}
    ).cast(INDEX_SCHEMA)  # fmt: skip
    path = tmp_path / "index.parquet"
    write_index(table.to_batches(), str(path))
    index = IndexFile(lambda: RangeFile(LocalStorage(), str(path), path.stat().st_size), cache_blocks=4)

    read: list[int] = []
    real_block = index._block

    def spied(part, number):  # a spy: which blocks are read, then the real read
        assert part == 0  # a plain file: one part
        read.append(number)
        return real_block(part, number)

    index._block = spied

    def matching(wanted: list[str]) -> tuple[list[str], list[int]]:
        read.clear()
        found = [key for table in index.rows_matching(pa.array(wanted)) for key in table.column("key").to_pylist()]
        return found, list(read)

    assert matching([keys[5], keys[7]]) == ([keys[5], keys[7]], [0])  # one block, once
    wanted = [keys[BLOCK_ROWS + 1], f"k{BLOCK_ROWS + 1:07d}x", f"k{count + 5:07d}"]  # present, absent, past the end
    assert matching(wanted) == ([keys[BLOCK_ROWS + 1]], [1, 2])
    assert matching(["a", "k"]) == ([], [])  # before the first key: in no block
    assert matching([]) == ([], [])
    many = keys[::2] + ["zz"]  # more keys than blocks: the blocks' first keys bisected into the keys
    assert matching(sorted(many)) == (keys[::2], [0, 1, 2])
