"""An upsert's or delete's change plan reads the base index's blocks its keys fall in and the blocks of
the touched shards' key ranges, not every layer (dataset/changes.plan_change, index_merge.BaseIndex);
a range a manifest gets wrong costs a full read, never a sample. Real index files, small blocks."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_webdataset.dataset.changes import UPSERT, _kept_rows, plan_change
from spark_webdataset.dataset.index_layers import IndexPart
from spark_webdataset.dataset.index_merge import BaseIndex
from spark_webdataset.dataset.layout import Version
from spark_webdataset.errors import CorruptIndex
from spark_webdataset.format import sample_index
from spark_webdataset.format.manifest import Manifest, ShardEntry
from spark_webdataset.format.sample_index import INDEX_SCHEMA, MERGE_SCHEMA, IndexFile, write_index

KEYS = [f"k{i:02d}" for i in range(20)]  # shard A holds k00-k09, shard B k10-k19; blocks of 4 keys


@pytest.fixture
def blocks_read(monkeypatch) -> list[int]:
    """Block numbers read from any index file (a spy on IndexFile._block that calls the real one)."""
    read: list[int] = []
    real = IndexFile._block

    def spied(self, part, number):
        assert part == 0  # files of one segment
        read.append(number)
        return real(self, part, number)

    monkeypatch.setattr(IndexFile, "_block", spied)
    monkeypatch.setattr(sample_index, "BLOCK_ROWS", 4)
    return read


def _base(tmp_path, keys: list[str] = KEYS) -> BaseIndex:
    shards = ["A.tar" if key < "k10" else "B.tar" for key in keys]
    table = pa.table({"key": keys, "shard": shards, "offset": [1024 * (int(k[1:]) % 10) for k in keys],
                      "length": [1024] * len(keys), "crc32c": pa.array([7] * len(keys), pa.uint32())})  # fmt: skip
    path = tmp_path / "index.parquet"
    write_index(table.cast(INDEX_SCHEMA).to_batches(), str(path))
    return BaseIndex([IndexPart(str(path), path.stat().st_size, None)], frozenset({"A.tar", "B.tar"}))


def _entries(a_range: tuple[str, str] = ("k00", "k09"), ascending: bool = True) -> dict[str, ShardEntry]:
    return {
        "A.tar": ShardEntry("A.tar", 10, 10_240, *a_range, crc32c="AAAAAA==", keys_ascending=ascending),
        "B.tar": ShardEntry("B.tar", 10, 10_240, "k10", "k19", crc32c="AAAAAA==", keys_ascending=ascending),
    }


def test_blocks_overlapping_reads_the_blocks_of_each_range_once_in_order(tmp_path, blocks_read) -> None:
    path = str(_base(tmp_path).parts[0].uri)
    index = IndexFile(lambda: open(path, "rb"), cache_blocks=0)

    def firsts(ranges):
        return [block.column("key")[0].as_py() for block in index.blocks_overlapping(ranges)]

    assert firsts([("k05", "k06")]) == ["k04"]
    assert firsts([("k03", "k04")]) == ["k00", "k04"]
    assert firsts([("k10", "k11"), ("k00", "k01"), ("k09", "k12")]) == ["k00", "k08", "k12"]
    assert firsts([("k99", "k99")]) == ["k16"]  # the last block may hold any later key
    assert firsts([("a", "b")]) == []  # before the first key: no block


def test_an_upsert_plan_reads_the_blocks_of_its_key_and_of_the_touched_shards_range(tmp_path, blocks_read) -> None:
    base = _base(tmp_path)
    entries = _entries()
    manifest = Manifest(list(entries.values()), [], {})
    plan = plan_change(UPSERT, pa.array(["k05"], pa.large_string()), 1, manifest, base,
                       Version.at(str(tmp_path / "v")), 7, str(tmp_path / "staging"))  # fmt: skip
    assert plan.removed_keys.to_pylist() == ["k05"]
    (rewrite,) = plan.rewrites
    assert rewrite.source.name == "A.tar" and rewrite.kept.column("key").to_pylist() == [
        k for k in KEYS[:10] if k != "k05"
    ]
    assert blocks_read == [1, 0, 1, 2]  # k05's block, then A's range k00-k09 (blocks 0-2); B's blocks never


def test_a_range_the_manifest_gets_wrong_costs_a_full_read_not_a_sample(tmp_path, blocks_read) -> None:
    """Block 0 alone (the lying range) holds 4 of A's 10 samples: the counts send it to every row."""
    base = _base(tmp_path)
    removed = pa.table({"key": ["k05"], "shard": ["A.tar"]})
    for entries in (_entries(("k00", "k03")), _entries(ascending=False)):  # a lying range; no range at all
        kept = _kept_rows(base, pa.array(["A.tar"]), pa.array(["k05"], pa.large_string()), removed, entries,
                          MERGE_SCHEMA)  # fmt: skip
        assert kept.column("key").to_pylist() == [k for k in KEYS[:10] if k != "k05"]


def test_an_index_short_of_a_touched_shards_samples_is_refused(tmp_path, blocks_read) -> None:
    base = _base(tmp_path, [key for key in KEYS if key != "k07"])  # the index lost k07, the manifest says 10
    removed = pa.table({"key": ["k05"], "shard": ["A.tar"]})
    with pytest.raises(CorruptIndex, match=r"9 live rows of shard A\.tar, its manifest 10 samples"):
        _kept_rows(base, pa.array(["A.tar"]), pa.array(["k05"], pa.large_string()), removed, _entries(), MERGE_SCHEMA)
