"""Layered sample indexes (issue 33): a chain of 30 versions (appends, upserts, deletes, local disk)
whose children store only the index rows of what they wrote, layered over their ancestors' files,
folded when the chain grows (index_layers.fold_count). Every reader reads each version exactly;
`open()` answers a key with a bounded number of ranged reads (counted by a spy on LocalStorage's
read_range that calls the real one: no behaviour is faked); gc keeps a retired parent's layer file.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import webdataset as wds

import spark_webdataset
from spark_webdataset.dataset.index_layers import MAX_INDEX_LAYERS
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.retention import RetentionPolicy, collect
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.format.manifest import Manifest
from spark_webdataset.storage.base import RangeFile
from spark_webdataset.storage.local import LocalStorage

pytestmark = pytest.mark.slow


def _write(spark, root: str, version: str, rows: dict[str, str], parent: str | None, change: str | None) -> None:
    frame = spark.createDataFrame(sorted(rows.items()), "__key__ string, txt string")
    writer = frame.coalesce(1).sortWithinPartitions("__key__").write.format("webdataset")
    writer = writer.option("maxSamplesPerShard", "20")
    if parent is not None:
        writer = writer.option("parent", parent)
    if change is not None:
        writer = writer.option("change", change)
    writer.mode("overwrite").save(f"{root}/versions/{version}")


def _delete(spark, root: str, version: str, keys: list[str], parent: str) -> None:
    frame = spark.createDataFrame([(key,) for key in keys], "__key__ string")
    frame.write.format("webdataset").option("parent", parent).option("change", "delete").mode("overwrite").save(
        f"{root}/versions/{version}"
    )


def _publish(root: str, version: str) -> Manifest:
    report = validate_version(f"{root}/versions/{version}", workers=1, progress=False)
    assert report.ok, report.errors
    publish(root, version, logical_date=f"2026-11-01T{int(version[1:]) // 60:02d}:{int(version[1:]) % 60:02d}:00Z")
    return Dataset(root).published(version)[1]


def _open_reads_exactly(root: str, version: str, wanted: dict[str, str]) -> None:
    uri = f"{root}/versions/{version}"
    samples = spark_webdataset.open(uri)
    ordered = sorted(wanted)
    assert len(samples) == len(wanted), version
    assert list(samples.keys()) == ordered, version
    assert {key: samples.get(key)["txt"].decode() for key in ordered} == wanted, version
    assert [samples[i]["__key__"] for i in range(len(samples))] == ordered, version
    assert samples[len(samples) - 1]["txt"].decode() == wanted[ordered[-1]]
    assert "absent" not in samples


@pytest.fixture(scope="module")
def chain(spark, tmp_path_factory) -> tuple[str, dict[str, dict[str, str]], dict[str, Manifest]]:
    """v00 (400 samples in 20 shards) and 29 children: appends, upserts and deletes in turn."""
    root = str(tmp_path_factory.mktemp("layers") / "data")
    pick = random.Random(33)
    current = {f"k{i:05d}": f"v00 text {i}" for i in range(400)}
    _write(spark, root, "v00", current, None, None)
    expected = {"v00": dict(current)}
    manifests = {"v00": _publish(root, "v00")}
    next_key = 400
    for number in range(1, 30):
        version, parent = f"v{number:02d}", f"v{number - 1:02d}"
        kind = ("append", "upsert", "delete")[number % 3]
        if kind == "delete":
            gone = pick.sample(sorted(current), 4)
            _delete(spark, root, version, gone, parent)
            current = {k: v for k, v in current.items() if k not in gone}
        else:
            rows = {f"k{next_key + i:05d}": f"{version} new {i}" for i in range(8)}
            next_key += 8
            if kind == "upsert":
                rows.update({key: f"{version} upserted" for key in pick.sample(sorted(current), 5)})
            _write(spark, root, version, rows, parent, kind)
            current = {**current, **rows}
        expected[version] = dict(current)
        manifests[version] = _publish(root, version)
    return root, expected, manifests


def test_a_chain_of_30_versions_stores_what_changed_and_stays_within_the_layer_bound(chain) -> None:
    root, _, manifests = chain
    depths = [len(manifest.sample_index_layers) for manifest in manifests.values()]
    assert depths[0] == 0  # no parent: a whole index, as every version before layers
    assert all(1 + depth <= MAX_INDEX_LAYERS for depth in depths), depths
    assert max(depths) >= 3, depths  # children read through their ancestors' files...
    assert any(after < before + 1 for before, after in zip(depths[1:], depths[2:])), depths  # ...and fold them
    for version, manifest in manifests.items():
        for layer in manifest.sample_index_layers:  # the version that stores the file, never a copy
            stored = Path(root, "versions", layer.version, layer.path)
            assert stored.stat().st_size == layer.bytes and int(layer.version[1:]) < int(version[1:])
    whole = manifests["v00"].sample_index_bytes
    appends = [m for v, m in manifests.items() if int(v[1:]) % 3 == 0 and m.sample_index_layers]
    assert len(appends) >= 5
    for manifest in appends:  # 8 new keys: the child's own file holds its change, not the dataset
        assert manifest.sample_index_bytes < whole / 2


def test_open_reads_every_version_of_the_chain_exactly(chain) -> None:
    root, expected, _ = chain
    for version, wanted in expected.items():
        _open_reads_exactly(root, version, wanted)


def test_spark_key_options_and_webdataset_read_layered_versions_exactly(spark, chain) -> None:
    root, expected, _ = chain
    for version in ("v14", "v29"):
        uri = f"{root}/versions/{version}"
        wanted = {key: value.encode() for key, value in expected[version].items()}
        whole = spark.read.format("webdataset").load(uri).select("__key__", "txt").collect()
        assert {row[0]: bytes(row[1]) for row in whole} == wanted
        for options, predicate in (
            ({"keyMin": "k00100", "keyMax": "k00199"}, lambda k: "k00100" <= k <= "k00199"),
            ({"keyPrefix": "k004"}, lambda k: k.startswith("k004")),
            ({"keyMin": "k00395"}, lambda k: k >= "k00395"),
        ):
            frame = spark.read.format("webdataset").options(**options).load(uri).select("__key__", "txt")
            assert {row[0]: bytes(row[1]) for row in frame.collect()} == {
                k: v for k, v in wanted.items() if predicate(k)
            }, (version, options)
        index = json.loads(Path(uri, "shardindex.json").read_text())
        urls = [str(Path(uri, entry["url"]).resolve()) for entry in index["shardlist"]]
        by_wds = {s["__key__"]: s["txt"] for s in wds.WebDataset(urls, shardshuffle=False)}
        assert by_wds == wanted


def test_open_answers_a_key_with_a_bounded_number_of_ranged_reads(chain, monkeypatch) -> None:
    root, expected, manifests = chain
    version = max(manifests, key=lambda v: (len(manifests[v].sample_index_layers), v))
    files = 1 + len(manifests[version].sample_index_layers)
    assert files >= 3
    reads: list[str] = []
    blocks: list[str] = []
    real_read, real_prefetch = LocalStorage.read_range, RangeFile.prefetch

    def counted_read(self, path, offset, length):  # a spy: counts, then the real read
        reads.append(path)
        return real_read(self, path, offset, length)

    def counted_prefetch(self, offset, length):
        blocks.append(self.path)
        return real_prefetch(self, offset, length)

    monkeypatch.setattr(LocalStorage, "read_range", counted_read)
    monkeypatch.setattr(RangeFile, "prefetch", counted_prefetch)
    samples = spark_webdataset.open(f"{root}/versions/{version}", cache_blocks=0)  # no block stays cached
    keys = sorted(expected[version])
    assert list(samples.keys()) == keys  # every file's footer, read once
    for key in pick_spread(keys):
        reads.clear(), blocks.clear()
        assert samples.get(key)["txt"].decode() == expected[version][key]
        index_reads = [path for path in reads if "/_index/" in path]
        shard_reads = [path for path in reads if path.endswith(".tar")]
        assert len(shard_reads) == 1, reads
        assert len(index_reads) <= files <= MAX_INDEX_LAYERS, (key, reads)  # one block a file at most
        assert len(blocks) == len(index_reads)  # each a block, no footer again
        assert len(reads) == len(index_reads) + 1


def pick_spread(keys: list[str]) -> list[str]:
    """Keys across the range: the first, the last and some between."""
    return [keys[0], keys[len(keys) // 3], keys[len(keys) // 2], keys[-5], keys[-1]]


def test_gc_keeps_a_retired_parents_layer_file_for_the_child(chain, tmp_path) -> None:
    import shutil

    source, expected, manifests = chain
    root = str(tmp_path / "copy")
    shutil.copytree(source, root)
    last = "v29"
    layers = manifests[last].sample_index_layers
    report = collect(root, RetentionPolicy(keep_last=1, min_age_seconds=0))
    assert last in report.kept and len(report.retired) == 29
    for layer in layers:  # every file the kept version reads through stays, with its version's manifest
        assert Path(root, "versions", layer.version, layer.path).exists()
        assert layer.path in report.still_referenced[layer.version]
    _open_reads_exactly(root, last, expected[last])
    for full in (False, True):  # --full reads every shard and compares it with the live rows of every layer
        report = validate_version(f"{root}/versions/{last}", workers=1, progress=False, write_report=False, full=full)
        assert report.ok, (full, report.errors)


def test_inspect_and_the_view_show_a_versions_index_layers(chain) -> None:
    from spark_webdataset.airflow.ui import pages
    from spark_webdataset.airflow.ui.summary import version_detail
    from spark_webdataset.dataset.catalog import describe_root, format_description

    root, _, manifests = chain
    layered = next(v for v, m in manifests.items() if len(m.sample_index_layers) >= 2)
    layers = manifests[layered].sample_index_layers
    described = {v.version: v.as_dict() for v in describe_root(root).versions}
    assert described[layered]["index_layers"] == len(layers)
    assert described[layered]["index_layer_bytes"] == sum(layer.bytes for layer in layers)
    assert described["v00"]["index_layers"] == 0
    line = next(line for line in format_description(describe_root(root)).splitlines() if f" {layered} " in line)
    assert f"index over {len(layers)} layer(s) of ancestors" in line
    detail = version_detail(root, layered)
    assert [layer["version"] for layer in detail["sample_index_layers"]] == [layer.version for layer in layers]
    html = pages.render("version", base="", name="data", v=detail, api="", preview=None, n=4, record_json="")
    assert 'id="index-layers"' in html and layers[-1].version in html


def test_a_key_in_a_layer_the_child_keeps_still_fails_an_append(spark, chain, tmp_path) -> None:
    import shutil

    from spark_webdataset.errors import DuplicateKey, from_spark

    source, expected, manifests = chain
    root = str(tmp_path / "copy")
    shutil.copytree(source, root)
    parent = max(manifests, key=lambda v: (len(manifests[v].sample_index_layers), v))
    deepest = manifests[parent].sample_index_layers[-1].version
    samples = spark_webdataset.open(f"{root}/versions/{parent}")
    key = next(k for k in samples.keys() if samples.locate(k).shard.startswith(f"../{deepest}/"))
    with pytest.raises(Exception) as caught:
        _write(spark, root, "v99", {key: "again", "k99999": "new"}, parent, "append")
    assert isinstance(from_spark(caught.value), DuplicateKey), caught.value
    assert key in str(caught.value) and f"index layer of version {deepest}" in str(caught.value)
    assert not Path(root, "versions", "v99", "_manifest.json").exists()
    _write(spark, root, "v99", {"k99999": "new"}, parent, "append")  # a new key alone is fine
    assert _publish(root, "v99").sample_index_layers[-1].version == deepest
    _open_reads_exactly(root, "v99", {**expected[parent], "k99999": "new"})


def test_a_changed_layer_file_fails_the_childs_validation_and_a_bad_layer_path_is_refused(chain, tmp_path) -> None:
    import shutil

    from spark_webdataset.errors import CorruptManifest

    source, _, manifests = chain
    root = str(tmp_path / "copy")
    shutil.copytree(source, root)
    child = next(v for v, m in manifests.items() if m.sample_index_layers)
    layer = manifests[child].sample_index_layers[0]
    stored = Path(root, "versions", layer.version, layer.path)
    stored.write_bytes(stored.read_bytes() + b"\0")
    report = validate_version(f"{root}/versions/{child}", workers=1, progress=False, write_report=False)
    assert not report.ok and any("sample index layer" in error["error"] for error in report.errors), report.errors
    document = json.loads(Path(root, "versions", child, "_manifest.json").read_text())
    document["sample_index_layers"][0]["path"] = "../../../etc/passwd"
    Path(root, "versions", child, "_manifest.json").write_text(json.dumps(document))
    with pytest.raises(CorruptManifest, match="sample index layer"):
        spark_webdataset.open(f"{root}/versions/{child}")


def test_each_child_of_the_chain_is_proven_from_its_change_reading_only_its_own_and_folded_files(
    chain, monkeypatch
) -> None:
    from spark_webdataset.dataset import index_layers

    root, _, manifests = chain
    for version, manifest in manifests.items():
        report = json.loads(Path(root, "versions", version, "_validation.json").read_text())
        recorded = [(entry["version"], entry["path"]) for entry in report["sample_index_files"]]
        assert recorded == [(version, manifest.sample_index)] + [
            (x.version, x.path) for x in manifest.sample_index_layers
        ]
        if manifest.parent is not None:
            assert report["sample_index_check"] == f"from the change over version {manifest.parent}", version
    streamed: list[str] = []
    real_part_rows = index_layers.part_rows

    def spied_part_rows(part, name=None, **options):  # a spy: records which files are read whole, then reads them
        streamed.append(part.uri)
        return real_part_rows(part, name, **options)

    monkeypatch.setattr(index_layers, "part_rows", spied_part_rows)
    import spark_webdataset.dataset.index_proof as index_proof

    monkeypatch.setattr(index_proof, "part_rows", spied_part_rows)
    kept_deep = [v for v, m in manifests.items() if len(m.sample_index_layers) >= 3]
    for version in kept_deep[-3:]:
        streamed.clear()
        report = validate_version(f"{root}/versions/{version}", workers=1, progress=False, write_report=False)
        assert report.ok and report.index_check.startswith("from the change"), report.errors
        kept = {str(Path(root, "versions", x.version, x.path)) for x in manifests[version].sample_index_layers}
        assert streamed and not kept & set(streamed), (version, streamed)  # a kept layer is never read whole
        full = validate_version(f"{root}/versions/{version}", workers=1, progress=False, write_report=False, full=True)
        assert full.ok and full.index_check == "from every live row (--full)"


def _small_chain(spark, root: str) -> dict[str, str]:
    """v0 (40 keys, 2 shards) and v1 (4 appended keys), both validated and published."""
    rows = {f"k{i:03d}": f"v0 {i}" for i in range(40)}
    _write(spark, root, "v0", rows, None, None)
    _publish(root, "v0")
    appended = {f"k{i:03d}": f"v1 {i}" for i in range(100, 104)}
    _write(spark, root, "v1", appended, "v0", "append")
    _publish(root, "v1")
    return {**rows, **appended}


def _commit_in_process(root: str, version: str, rows: dict[str, str], parent: str, change: str = "append") -> None:
    """A `change` of `rows` on `parent` by the writer's own task and commit, in this process (Spark runs
    the commit in a Python worker, where a test's fault would not reach)."""
    import pyarrow as pa

    from spark_webdataset.spark.options import WriteOptions
    from spark_webdataset.spark.writer import WebDatasetWriter
    from tests.support.fenced_committer import SCHEMA

    options = {"path": f"{root}/versions/{version}", "parent": parent, "change": change}
    writer = WebDatasetWriter(WriteOptions.parse(options), SCHEMA, overwrite=True)
    keys = sorted(rows)
    batch = pa.record_batch([pa.array(keys), pa.array([rows[k] for k in keys])], names=["__key__", "txt"])
    writer.commit([writer.write(iter([batch]))])


def test_a_key_a_faulty_commit_let_through_into_a_kept_layer_fails_the_childs_validation(
    spark, tmp_path, monkeypatch
) -> None:
    """The commit's own check is switched off (a fake fault: a commit bug the real code cannot be
    made to have) so a key already live in a kept layer is written again; the change proof must find it."""
    from spark_webdataset.dataset import commit

    root = str(tmp_path / "data")
    _small_chain(spark, root)
    monkeypatch.setattr(commit, "layer_rows_near", lambda part, listed, keys: iter(()))
    _commit_in_process(root, "v2", {"k007": "again", "k200": "new"}, "v1")
    monkeypatch.undo()
    manifest = Dataset(root).version("v2").read_manifest()
    assert [layer.version for layer in manifest.sample_index_layers] == ["v1", "v0"]  # both kept, none folded
    report = validate_version(f"{root}/versions/v2", workers=1, progress=False, write_report=False)
    assert report.index_check == "from the change over version v1"
    assert not report.ok and any("'k007'" in e["error"] and "version v0" in e["error"] for e in report.errors), (
        report.errors
    )
    full = validate_version(f"{root}/versions/v2", workers=1, progress=False, write_report=False, full=True)
    assert not full.ok and any(e["key"] == "k007" for e in full.errors), full.errors


def test_a_folded_row_a_faulty_commit_dropped_fails_the_childs_validation(spark, tmp_path, monkeypatch) -> None:
    """The commit drops one live row of a parent file it folds (a fake fault, as above): the child's
    own file no longer holds exactly the folded rows, and both proofs say so."""
    from spark_webdataset.dataset import commit

    root = str(tmp_path / "data")
    _small_chain(spark, root)
    real = commit.base_part_rows
    dropped: list[str] = []

    def dropping(part, listed):
        for batch in real(part, listed):
            if part.stored_in == "v1" and not dropped and len(batch):
                dropped.append(batch.column(0)[0].as_py())
                batch = batch.slice(1)
            yield batch

    monkeypatch.setattr(commit, "base_part_rows", dropping)
    _commit_in_process(root, "v2", {f"k{i:03d}": "new" for i in range(200, 230)}, "v1")
    monkeypatch.undo()
    manifest = Dataset(root).version("v2").read_manifest()
    assert dropped and "v1" not in [layer.version for layer in manifest.sample_index_layers]  # v1's file folded
    report = validate_version(f"{root}/versions/v2", workers=1, progress=False, write_report=False)
    assert report.index_check == "from the change over version v1"
    assert not report.ok and any(dropped[0] in e["error"] and "folded" in e["error"] for e in report.errors), (
        report.errors
    )
    full = validate_version(f"{root}/versions/v2", workers=1, progress=False, write_report=False, full=True)
    assert not full.ok and any("samples of ../v1/" in e["error"] for e in full.errors), full.errors


def test_a_copied_root_or_an_older_parent_report_is_proven_from_every_live_row(spark, tmp_path) -> None:
    import shutil

    root = str(tmp_path / "data")
    wanted = _small_chain(spark, root)
    assert validate_version(f"{root}/versions/v1", workers=1, write_report=False).index_check == (
        "from the change over version v0"
    )
    copy = str(tmp_path / "copy")
    shutil.copytree(root, copy)  # new inodes: the identities the reports recorded no longer hold
    report = validate_version(f"{copy}/versions/v1", workers=1, write_report=False)
    assert report.ok and report.index_check.startswith("from every live row (index file"), report.index_check
    parent_report = Path(root, "versions", "v0", "_validation.json")
    document = json.loads(parent_report.read_text())
    del document["sample_index_files"]  # as a report written before reports recorded index files
    parent_report.write_text(json.dumps(document))
    report = validate_version(f"{root}/versions/v1", workers=1, write_report=False)
    assert report.ok and report.index_check.startswith("from every live row"), report.index_check
    _open_reads_exactly(root, "v1", wanted)


def test_segmented_index_files_commit_validate_and_read_exactly_through_every_reader(
    spark, tmp_path, monkeypatch
) -> None:
    """An index file past SEGMENT_BLOCKS blocks is written in segments (format/index_segments.py). At
    8,192-row blocks that takes a million keys, so blocks of 4 rows and segments of 2 blocks are patched
    in for the commits made in this process; everything after reads the files unpatched, as any
    reader would (Spark's executors too)."""
    from spark_webdataset.format import sample_index
    from spark_webdataset.format.index_segments import open_segments

    def in_segments(version: str, rows: dict[str, str], parent: str, change: str) -> None:
        with monkeypatch.context() as patched:
            patched.setattr(sample_index, "BLOCK_ROWS", 4)
            patched.setattr(sample_index, "SEGMENT_BLOCKS", 2)
            _commit_in_process(root, version, rows, parent, change)

    def proven_and_read(version: str, wanted: dict[str, str]) -> None:
        uri = f"{root}/versions/{version}"
        report = validate_version(uri, workers=1, progress=False, write_report=False)
        assert report.ok and report.index_check.startswith("from the change"), (report.errors, report.index_check)
        full = validate_version(uri, workers=1, progress=False, write_report=False, full=True)
        assert full.ok, full.errors
        _publish(root, version)
        _open_reads_exactly(root, version, wanted)

    root = str(tmp_path / "data")
    expected = _small_chain(spark, root)
    appended = {f"k{i:03d}": f"v2 {i}" for i in range(200, 260)}
    in_segments("v2", appended, "v1", "append")
    v2 = Dataset(root).version("v2")
    with open(v2.path(v2.read_manifest().sample_index), "rb") as stream:
        plain, segments = open_segments(stream, "v2's index")
    assert plain is None and len(segments) >= 8  # written in segments
    expected_v2 = {**expected, **appended}
    proven_and_read("v2", expected_v2)
    upserted = {"k005": "v3 upserted", "k101": "v3 upserted", "k230": "v3 upserted", "k300": "v3 new"}
    in_segments("v3", upserted, "v2", "upsert")  # its plan reads v2's segments
    expected_v3 = {**expected_v2, **upserted}
    proven_and_read("v3", expected_v3)
    uri = f"{root}/versions/v3"
    frame = spark.read.format("webdataset").options(keyMin="k100", keyMax="k239").load(uri).select("__key__", "txt")
    assert {row[0]: bytes(row[1]).decode() for row in frame.collect()} == {
        k: v for k, v in expected_v3.items() if "k100" <= k <= "k239"
    }
    index = json.loads(Path(uri, "shardindex.json").read_text())
    urls = [str(Path(uri, entry["url"]).resolve()) for entry in index["shardlist"]]
    assert {s["__key__"]: s["txt"].decode() for s in wds.WebDataset(urls, shardshuffle=False)} == expected_v3
    # a key filter that says no to its own key (the child proofs skip blocks by them): v2's own
    # validation reads its file whole and checks every block's filter
    path = Path(v2.path(v2.read_manifest().sample_index))
    data = bytearray(path.read_bytes())
    first = segments[0]
    data[first.offset + first.bytes : first.end] = bytes(first.filter_bytes)
    path.write_bytes(bytes(data))
    report = validate_version(f"{root}/versions/v2", workers=1, progress=False, write_report=False)
    assert not report.ok and any("key filter says key" in e["error"] for e in report.errors), report.errors
