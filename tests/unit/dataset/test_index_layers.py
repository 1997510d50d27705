"""The layered sample index (dataset/index_layers.py): the live rule over real index files, the
folding rule's bounds, and the manifest's `sample_index_layers` (absent = a whole index, as before)."""

from __future__ import annotations

import json
import pickle

import pyarrow as pa
import pytest

from spark_webdataset.dataset.index_layers import (
    MAX_INDEX_LAYERS,
    IndexPart,
    LayeredIndex,
    check_layer,
    fold_count,
    merged_live_rows,
)
from spark_webdataset.errors import CorruptManifest
from spark_webdataset.format.manifest import IndexLayer, Manifest, ShardEntry
from spark_webdataset.format.sample_index import INDEX_SCHEMA, write_index


def _file(path, rows: list[tuple[str, str, int]]) -> IndexPart:
    table = pa.table(
        {
            "key": [key for key, _, _ in rows],
            "shard": [shard for _, shard, _ in rows],
            "offset": [offset for _, _, offset in rows],
            "length": [512] * len(rows),
            "crc32c": pa.array([7] * len(rows), pa.uint32()),
        }
    ).cast(INDEX_SCHEMA)
    write_index(table.sort_by("key").to_batches(max_chunksize=2), str(path))
    return path


def _parts(tmp_path) -> tuple[list[IndexPart], list[str]]:
    """v1 wrote shards 0 and 1; v2 upserted b (shard 1 rewritten as its shard 2) and added d;
    v3 (reading) added e and deleted c (v1's shard 0 rewritten as v3's shard 3)."""
    v1 = _file(tmp_path / "v1.parquet", [("a", "shard-000000.tar", 0), ("b", "shard-000001.tar", 0),
                                         ("c", "shard-000000.tar", 512), ("f", "shard-000001.tar", 512)])  # fmt: skip
    v2 = _file(tmp_path / "v2.parquet", [("b", "shard-000002.tar", 0), ("d", "shard-000002.tar", 512),
                                         ("f", "shard-000002.tar", 1024)])  # fmt: skip
    v3 = _file(tmp_path / "v3.parquet", [("a", "shard-000003.tar", 0), ("e", "shard-000004.tar", 0)])
    parts = [
        IndexPart(str(v3), v3.stat().st_size, None),
        IndexPart(str(v2), v2.stat().st_size, "v2", 3),
        IndexPart(str(v1), v1.stat().st_size, "v1", 4),
    ]
    listed = ["shard-000003.tar", "shard-000004.tar", "../v2/shard-000002.tar"]  # v1's shards are gone
    return parts, listed


def test_a_lookup_takes_the_first_live_row_and_skips_dead_ones(tmp_path) -> None:
    parts, listed = _parts(tmp_path)
    index = LayeredIndex(parts, listed, 4, name="v3")
    assert index.get("a").shard == "shard-000003.tar"  # the own file's row
    assert index.get("b").shard == "../v2/shard-000002.tar"  # v2's own shard, as v3 names it
    assert index.get("f").offset == 1024
    assert index.get("c") is None  # only in v1's shard 0, which v3 no longer lists: deleted
    assert index.get("zz") is None
    assert list(index.keys()) == ["a", "b", "d", "e", "f"]
    assert len(index) == 5
    assert [index.at(i).key for i in range(5)] == ["a", "b", "d", "e", "f"] and index.at(-1).key == "f"
    with pytest.raises(IndexError):
        index.at(5)
    assert [k for _, table in index.blocks_from("d") for k in table.column("key").to_pylist() if k >= "d"] == [
        "d",
        "e",
        "f",
    ]
    again = pickle.loads(pickle.dumps(index))
    assert again.get("d").shard == "../v2/shard-000002.tar" and len(again) == 5
    merged = pa.Table.from_batches(list(merged_live_rows(parts, frozenset(listed))))
    assert merged.column("key").to_pylist() == ["a", "b", "d", "e", "f"]


def test_folding_keeps_the_chain_within_the_bound_and_leaves_a_large_base_alone() -> None:
    def layers(*rows: int) -> list[IndexLayer]:
        return [IndexLayer(f"v{n}", "_index/000000.parquet", 100, count) for n, count in enumerate(rows)]

    assert fold_count(10, layers(1_000_000)) == 0  # a 1 % change over a whole base: layered
    assert fold_count(10, layers(10, 1_000_000)) == 1  # a small neighbour is folded (tiered)
    assert fold_count(10, layers(10, 20, 40, 1_000_000)) == 3
    deep = layers(*[10**6] * 20)
    assert 1 + len(deep) - fold_count(10, deep) <= MAX_INDEX_LAYERS  # the depth bound, whatever the sizes
    assert fold_count(10, []) == 0


def test_the_manifest_records_layers_and_a_whole_index_reads_as_before() -> None:
    shard = ShardEntry("shard-000000.tar", 1, 1024, "a", "a")
    whole = Manifest([shard], [], {}, sample_index="_index/000000.parquet", sample_index_bytes=10)
    assert "sample_index_layers" not in json.loads(whole.to_json())  # versions without layers: same bytes
    assert Manifest.from_json(whole.to_json()).sample_index_layers == []
    layer = IndexLayer("v1", "_index/000002.parquet", 500, 40)
    layered = Manifest(
        [shard],
        [],
        {},
        sample_index="_index/000000.parquet",
        sample_index_bytes=10,
        parent="v1",
        sample_index_layers=[layer],
    )
    assert Manifest.from_json(layered.to_json()).sample_index_layers == [layer]
    document = json.loads(layered.to_json())
    for bad in ({"version": "v1", "path": "x", "bytes": -1, "rows": 1}, {**layer.to_dict(), "more": 1}, "v1"):
        with pytest.raises(CorruptManifest, match="sample_index_layers"):
            Manifest.from_json(json.dumps({**document, "sample_index_layers": [bad]}).encode(), "m.json")


@pytest.mark.parametrize(
    "layer",
    [
        IndexLayer("..", "_index/000000.parquet", 1, 1),
        IndexLayer("v1/../v2", "_index/000000.parquet", 1, 1),
        IndexLayer("v1", "/etc/passwd", 1, 1),
        IndexLayer("v1", "../v2/_index/000000.parquet", 1, 1),
        IndexLayer("v1", "shard-000000.tar", 1, 1),
    ],
)
def test_a_layer_outside_the_layout_is_a_corrupt_manifest(layer) -> None:
    with pytest.raises(CorruptManifest, match="m.json"):
        check_layer(layer, "m.json")
