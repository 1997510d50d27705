"""A segmented sample index (format/index_segments.py) answers every question exactly as a plain
one and as a plain-Python model do, parses only the footers of the segments it touches, and refuses
a directory that lies. Blocks of 4 rows (BLOCK_ROWS patched) make a few hundred keys many segments."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_webdataset.errors import CorruptIndex
from spark_webdataset.format import index_segments, key_filter, sample_index
from spark_webdataset.format.index_segments import open_segments
from spark_webdataset.format.sample_index import INDEX_SCHEMA, IndexFile, index_block_rows, read_index, write_index
from spark_webdataset.storage.base import RangeFile
from spark_webdataset.storage.local import LocalStorage

BLOCK = 4


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch) -> None:
    monkeypatch.setattr(sample_index, "BLOCK_ROWS", BLOCK)


def _rows(keys: list[str]) -> pa.Table:
    return pa.table(
        {"key": keys, "shard": [f"shard-{i % 3:06d}.tar" for i in range(len(keys))],
         "offset": [512 * i for i in range(len(keys))], "length": [512] * len(keys),
         "crc32c": pa.array([i % 97 for i in range(len(keys))], pa.uint32())}
    ).cast(INDEX_SCHEMA)  # fmt: skip


def _written(keys: list[str], segment_blocks: int) -> bytes:
    sink = io.BytesIO()
    assert write_index(_rows(keys).to_batches(max_chunksize=7), sink, segment_blocks=segment_blocks) == len(keys)
    return sink.getvalue()


def _index(data: bytes, cache_blocks: int = 8) -> IndexFile:
    return IndexFile(lambda: io.BytesIO(data), cache_blocks=cache_blocks, name="index.parquet")


def _flat(tables) -> list[str]:
    return [key for table in tables for key in table.column("key").to_pylist()]


keys_strategy = st.lists(st.text(alphabet="abcxyz0", min_size=1, max_size=5), max_size=120, unique=True).map(sorted)


@settings(max_examples=60, deadline=None)
@given(
    keys=keys_strategy,
    segment_blocks=st.integers(1, 4),
    probes=st.lists(st.text(alphabet="abcxyz0", max_size=5), max_size=20),
)
def test_a_segmented_index_answers_as_the_model_does(keys, segment_blocks, probes) -> None:
    """Every question of IndexFile, read_index and index_block_rows against a dict of the keys."""
    data = _written(keys, segment_blocks)
    plain, segments = open_segments(io.BytesIO(data), "index.parquet")
    assert (plain is None) == (len(keys) > segment_blocks * BLOCK)  # one segment: a plain parquet file
    index = _index(data)
    rows = _rows(keys)
    assert len(index) == len(keys)
    assert list(index.keys()) == keys
    assert [index.at(i).key for i in range(len(keys))] == keys
    assert [index.at(-1 - i).key for i in range(min(3, len(keys)))] == keys[::-1][:3]
    model = {key: position for position, key in enumerate(keys)}
    for probe in [*probes, *keys[::7]]:
        found = index.get(probe)
        if probe in model:
            assert found is not None and (found.key, found.offset, found.crc32c) == (
                probe, 512 * model[probe], model[probe] % 97
            )  # fmt: skip
        else:
            assert found is None
    wanted = sorted(set(probes) | set(keys[::5]))
    assert _flat(index.rows_matching(pa.array(wanted, pa.string()))) == [k for k in wanted if k in model]
    for first in [*probes[:3], None]:
        after = [key for key in keys if first is None or key >= first]
        seen = _flat(table for _, table in index.blocks_from(first))
        assert seen[len(seen) - len(after) :] == after and seen == sorted(seen)
    ranges = [tuple(sorted(pair)) for pair in zip(probes[::2], probes[1::2])]
    covered = set(_flat(index.blocks_overlapping(ranges)))
    assert {key for key in keys for low, high in ranges if low <= key <= high} <= covered
    assert read_index(data).equals(rows)
    assert pa.Table.from_batches(list(index_block_rows(data)), INDEX_SCHEMA).equals(rows)


def test_a_lookup_parses_only_the_segment_it_falls_in_with_few_ranged_reads(tmp_path, monkeypatch) -> None:
    keys = [f"k{i:05d}" for i in range(400)]  # 100 blocks, 10 segments of 10
    path = tmp_path / "index.parquet"
    path.write_bytes(_written(keys, 10))
    reads: list[tuple[int, int]] = []
    real_read = LocalStorage.read_range

    def counted(self, where, offset, length):  # a spy: counts, then the real read
        reads.append((offset, length))
        return real_read(self, where, offset, length)

    monkeypatch.setattr(LocalStorage, "read_range", counted)
    index = IndexFile(lambda: RangeFile(LocalStorage(), str(path), path.stat().st_size), cache_blocks=0)
    assert len(index) == 400
    opened = len(reads)
    assert opened <= 3  # the tail: its footer and the directory in it
    assert index.get("k00123").offset == 512 * 123
    assert len(index._parts) == 1  # one segment's footer parsed, not ten
    assert len(reads) - opened <= 4  # that segment's footer (end, then footer) and one block
    reads.clear()
    assert index.get("k00125").offset == 512 * 125  # the segment is cached: one block
    assert len(reads) == 1
    assert index.get("k00123x") is None and index.get("a") is None and index.get("z") is None


def _tampered(data: bytes, change) -> bytes:
    """`data` with its tail's directory changed by `change` (a dict of columns -> None)."""
    plain, segments = open_segments(io.BytesIO(data), "x")
    assert plain is None
    columns = {name: [getattr(s, name) for s in segments] for name in index_segments.Segment.__dataclass_fields__}
    change(columns)
    tail_at = segments[-1].end
    sink = io.BytesIO()
    writer = pq.ParquetWriter(sink, index_segments.TAIL_SCHEMA, store_schema=False)
    writer.add_key_value_metadata(
        {"kind": index_segments.DIRECTORY_KIND, "segments": json.dumps(columns), "filter": key_filter.KIND}
    )
    writer.close()
    return data[:tail_at] + sink.getvalue()


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda c: c["rows"].__setitem__(1, c["rows"][1] + 1), "segment 1 (byte"),
        (lambda c: c["first_key"].__setitem__(2, "k00009"), "segment 2"),
        (lambda c: c["offset"].__setitem__(1, 0), "lists segment 1"),
        (lambda c: c["bytes"].__setitem__(0, c["bytes"][0] + 1), "lists segment 1"),
        (lambda c: [c[name].pop() for name in c], "ending at byte"),
        (lambda c: c["last_key"].__setitem__(0, 7), "types"),
        (lambda c: c.pop("rows"), "does not read"),
    ],
)
def test_a_directory_that_lies_is_refused_naming_the_file(change, said) -> None:
    keys = [f"k{i:05d}" for i in range(40)]
    data = _tampered(_written(keys, 2), change)
    with pytest.raises(CorruptIndex, match=r"index\.parquet.*" + said.replace("(", r"\(")):
        index = _index(data)
        for key in keys:
            index.get(key)
        list(index.keys())
    with pytest.raises(CorruptIndex, match="index.parquet"):
        list(index_block_rows(data, "index.parquet"))


def test_a_truncated_segmented_index_is_refused() -> None:
    data = _written([f"k{i:05d}" for i in range(40)], 2)
    for cut in (len(data) - 1, len(data) // 2, 3):
        with pytest.raises(CorruptIndex, match="index.parquet"):
            list(index_block_rows(data[:cut], "index.parquet"))


@settings(max_examples=80, deadline=None)
@given(
    keys=st.lists(st.text(max_size=12), max_size=300, unique=True), others=st.lists(st.text(max_size=12), max_size=50)
)
def test_a_key_filter_never_says_no_to_a_key_it_was_built_from(keys, others) -> None:
    """Unicode, empty and long keys, any count: the one property a lookup that skips blocks relies on."""
    built = key_filter.build(pa.array(keys, pa.string()))
    assert len(built) == key_filter.filter_bytes(len(keys))
    assert key_filter.may_hold(built, pa.array(keys, pa.large_string())).all()
    assert key_filter.may_hold(built, pa.array(keys + others, pa.string()).slice(len(keys))).shape == (len(others),)


def test_key_filters_answer_rarely_for_absent_keys() -> None:
    keys = pa.array([f"{n:016x}" for n in range(0, 8192 * 7919, 7919)])
    absent = pa.array([f"{n:016x}" for n in range(1, 200_000 * 7919, 7919)])  # none of them a key
    assert key_filter.may_hold(key_filter.build(keys), absent).mean() < 0.002  # ~0.05 % at 16 bits, 11 probes


def _blocks_read(index: IndexFile) -> list[tuple[int, int]]:
    read: list[tuple[int, int]] = []
    real = index._block

    def spied(part, number):  # a spy: which blocks are read, then the real read
        read.append((part, number))
        return real(part, number)

    index._block = spied
    return read


def test_rows_matching_reads_only_the_blocks_whose_filters_may_hold_a_key() -> None:
    keys = [f"k{i:05d}" for i in range(400)]  # 100 blocks of 4, 10 segments of 10
    index = _index(_written(keys, 10), cache_blocks=0)
    read = _blocks_read(index)
    absent = sorted(f"{key}x" for key in keys)  # one absent key in every block
    assert _flat(index.rows_matching(pa.array(absent))) == []
    assert len(read) <= 3, read  # false positives only (~0.05 % a key)
    read.clear()
    wanted = sorted([*absent, keys[13], keys[250], keys[251]])
    assert _flat(index.rows_matching(pa.array(wanted))) == [keys[13], keys[250], keys[251]]
    assert {(0, 3), (6, 2)} <= set(read) and len(read) <= 5, read  # k00013: segment 0, block 3; k00250-1: 6, 2
    read.clear()
    assert _flat(index.rows_matching(pa.array([keys[13]]))) == [keys[13]]  # one block: read, no filter
    assert read == [(0, 3)]


def test_a_filter_that_says_no_to_its_own_key_fails_a_whole_read_that_checks_filters() -> None:
    keys = [f"k{i:05d}" for i in range(40)]
    data = bytearray(_written(keys, 2))
    _, segments = open_segments(io.BytesIO(bytes(data)), "x")
    second = segments[2]
    start = second.offset + second.bytes
    data[start : start + second.filter_bytes] = bytes(second.filter_bytes)  # segment 2's filters: all zero
    damaged = bytes(data)
    assert pa.Table.from_batches(list(index_block_rows(damaged, "index.parquet")), INDEX_SCHEMA).num_rows == 40
    with pytest.raises(CorruptIndex, match=r"index\.parquet \(segment 2\) block 0: its key filter says key 'k00016'"):
        list(index_block_rows(damaged, "index.parquet", check_filters=True))
    # what the check guards: a lookup trusting those filters would not find segment 2's keys
    assert _flat(_index(damaged).rows_matching(pa.array(keys))) == keys[:16] + keys[24:]
