"""Upserts and deletes against a published parent (issue 22): the shards that hold replaced or deleted
keys are rewritten without them, every other shard stays referenced and unopened, and every reader
sees exactly each version's samples.

A chain v1 <- v2 (upsert) <- v3 (delete) <- v4 (upsert touching v3's rewrite), on local disk and on
the GCS emulator. The job's opens of the parent's shards are counted by the kernel (inotify).
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from pathlib import Path

import pytest

import spark_webdataset
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import BadOption, ChecksumMismatch, from_spark
from spark_webdataset.storage import storage_for
from tests.support.file_opens import opened_files

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def _write(spark, root: str, version: str, rows: dict[str, str], parent: str | None, change: str | None) -> None:
    frame = spark.createDataFrame(sorted(rows.items()), "__key__ string, txt string")
    writer = (
        frame.coalesce(1).sortWithinPartitions("__key__").write.format("webdataset").option("maxSamplesPerShard", "20")
    )
    if parent is not None:
        writer = writer.option("parent", parent)
    if change is not None:
        writer = writer.option("change", change)
    writer.mode("overwrite").save(f"{root}/versions/{version}")


def _delete(spark, root: str, version: str, keys: list[str], parent: str, mode: str = "overwrite") -> None:
    frame = spark.createDataFrame([(key,) for key in keys], "__key__ string").repartition(2)
    frame.write.format("webdataset").option("parent", parent).option("change", "delete").mode(mode).save(
        f"{root}/versions/{version}"
    )


def _publish(root: str, version: str) -> None:
    report = validate_version(f"{root}/versions/{version}")
    assert report.ok, report.errors
    publish(root, version)


def _reads_of_every_reader(spark, root: str, version: str) -> dict[str, bytes]:
    """Each sample's text, read through our reader, open(), webdataset and wids (both from the
    version's shardindex.json; on gs:// webdataset through `pipe:spark-webdataset cat` and wids
    through the consumer's download handler, no gsutil), which must all agree."""
    import webdataset as wds

    from spark_webdataset.airflow.consumer import wids_through_storage

    uri = f"{root}/versions/{version}"
    by_spark = {
        row[0]: bytes(row[1]) for row in spark.read.format("webdataset").load(uri).select("__key__", "txt").collect()
    }
    samples = spark_webdataset.open(uri)
    by_open = {key: samples.get(key)["txt"] for key in samples.keys()}
    assert by_open == by_spark
    index = json.loads(storage_for(uri).read_bytes(f"{uri}/shardindex.json"))
    urls = [f"{root}/versions/{entry['url'][3:]}" if entry["url"].startswith("../") else f"{uri}/{entry['url']}"
            for entry in index["shardlist"]]  # fmt: skip
    if uri.startswith("gs://"):
        urls = [f"pipe:{BIN}/spark-webdataset cat {url}" for url in urls]
    by_wds = {s["__key__"]: s["txt"] for s in wds.WebDataset(urls, shardshuffle=False)}
    assert by_wds == by_spark
    ds = wids_through_storage().ShardListDataset(f"{uri}/shardindex.json", cache_dir=tempfile.mkdtemp(prefix="wids-"))
    by_wids = {ds[i]["__key__"]: ds[i][".txt"].encode() for i in range(len(ds))}  # wids decodes .txt
    assert by_wids == by_spark
    return by_spark


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_a_chain_of_upserts_and_deletes_rewrites_only_touched_shards(spark, tmp_path, where, request) -> None:
    base = request.getfixturevalue("bucket") if where == "gcs" else str(tmp_path)
    root = f"{base}/data"
    storage = storage_for(root)
    expected = {f"k{i:04d}": f"v1 text {i}" for i in range(200)}  # 10 shards of 20, key-sorted
    _write(spark, root, "v1", expected, None, None)
    _publish(root, "v1")
    assert _reads_of_every_reader(spark, root, "v1") == {k: v.encode() for k, v in expected.items()}

    # v2: 5 keys of v1's first shard replaced, 10 new keys
    changes = {f"k{i:04d}": f"v2 text {i}" for i in [*range(10, 15), *range(200, 210)]}
    watch = opened_files(f"{root}/versions/v1") if where == "local" else contextlib.nullcontext(None)
    with watch as opened:
        _write(spark, root, "v2", changes, "v1", "upsert")
    if opened is not None:  # the parent's index and manifest, and of its shards only the touched one
        assert {name for name in opened if name.endswith(".tar")} == {"shard-000000.tar"}, opened
    _publish(root, "v2")
    expected_v2 = {**expected, **changes}
    _, m2 = Dataset(root).published("v2")
    assert m2.run["change"] == {
        "change": "upsert", "requested": 15, "added": 10, "replaced": 5, "deleted": 0, "absent": 0,
        "shards_rewritten": 1, "shards_emptied": 0, "samples_copied": 15,
    }  # fmt: skip
    assert [s.version for s in m2.shards[1:10]] == ["v1"] * 9 and m2.shards[0].version is None  # rewritten in place
    assert sorted(s.name for s in m2.own_shards) == ["shard-000010.tar", "shard-000011.tar"]
    assert sum(s.bytes for s in m2.own_shards) < sum(s.bytes for s in m2.shards) / 4  # what changed, not a copy

    # v3: 2 keys deleted from v2's rewrite, 1 from v1's last shard, 1 absent key counted
    _delete(spark, root, "v3", ["k0015", "k0016", "k0199", "absent-key"], "LATEST")
    _publish(root, "v3")
    _, m3 = Dataset(root).published("v3")
    assert (m3.run["change"]["deleted"], m3.run["change"]["absent"], m3.run["change"]["shards_rewritten"]) == (3, 1, 2)
    assert [f["name"] for f in m3.fields] == ["txt"]  # the parent's fields: a delete reads keys alone
    expected_v3 = {k: v for k, v in expected_v2.items() if k not in ("k0015", "k0016", "k0199")}

    # v4: v3's own rewrite is touched again; references still name the version that stores the bytes
    _write(spark, root, "v4", {"k0017": "v4 text", "k0150": "v4 text"}, "v3", "upsert")
    _publish(root, "v4")
    _, m4 = Dataset(root).published("v4")
    assert {s.version for s in m4.shards if s.version} <= {"v1", "v2", "v3"}
    expected_v4 = {**expected_v3, "k0017": "v4 text", "k0150": "v4 text"}

    for version, wanted in {"v1": expected, "v2": expected_v2, "v3": expected_v3, "v4": expected_v4}.items():
        assert _reads_of_every_reader(spark, root, version) == {k: v.encode() for k, v in wanted.items()}, version
    stored = sum(size for name, size in storage.list_sizes(f"{root}/versions/v4").items() if name.endswith(".tar"))
    assert stored == sum(s.bytes for s in m4.own_shards) < m4.bytes / 4


def test_a_change_reads_the_kept_samples_against_the_index_and_refuses_a_changed_parent(spark, tmp_path) -> None:
    root = str(tmp_path / "data")
    _write(spark, root, "v1", {f"k{i:04d}": f"text {i}" for i in range(40)}, None, None)
    _publish(root, "v1")
    shard = Path(root, "versions", "v1", "shard-000000.tar")
    data = bytearray(shard.read_bytes())
    data[1024 + 600] ^= 1  # inside the second sample's bytes (the first is replaced)
    shard.write_bytes(bytes(data))
    with pytest.raises(Exception) as caught:
        _write(spark, root, "v2", {"k0000": "new"}, "v1", "upsert")
    cause = from_spark(caught.value)
    assert isinstance(cause, ChecksumMismatch) and "shard-000000.tar of version v1" in str(cause), caught.value
    assert not Path(root, "versions", "v2", "_manifest.json").exists()


def test_a_delete_needs_a_published_parent(spark, tmp_path) -> None:
    with pytest.raises(Exception) as caught:
        _delete(spark, str(tmp_path / "data"), "v1", ["k"], "LATEST")
    assert isinstance(from_spark(caught.value), BadOption) and "no published parent" in str(caught.value)
    with pytest.raises(Exception) as caught:
        frame = spark.range(1).selectExpr("'k' AS __key__", "'t' AS txt")
        frame.write.format("webdataset").option("change", "upsert").mode("overwrite").save(str(tmp_path / "x"))
    assert isinstance(from_spark(caught.value), BadOption) and "needs option parent" in str(caught.value)


def test_the_build_job_upserts_and_deletes_with_the_first_run_full(spark, tmp_path) -> None:
    from spark_webdataset.jobs.build import build, main, parser

    days = {"day1": (0, 60), "day2": (50, 70), "gone": (55, 58)}
    for name, (start, end) in days.items():
        spark.range(start, end).selectExpr("id", "CAST(id * 7 % 10 AS INT) AS label").write.parquet(
            str(tmp_path / name)
        )
    root = tmp_path / "root"

    def job(day: str, source: str, change: str) -> dict:
        args = ["--source", str(tmp_path / source), "--output", str(root), "--version", day, "--parent", "LATEST",
                "--change", change, "--key", "format_string('%04d', id)", "--field", "cls=label",
                "--max-samples-per-shard", "20", "--order", "key"]  # fmt: skip
        summary = build(spark, parser().parse_args(args))
        assert validate_version(str(root / "versions" / day)).ok
        publish(str(root), day)
        return summary

    first = job("day1", "day1", "upsert")  # nothing published yet: a full build
    assert (first["samples"], first["parent"], first["bytes_referenced"]) == (60, None, 0) and "change" not in first
    second = job("day2", "day2", "upsert")
    assert (second["samples"], second["change"]["replaced"], second["change"]["added"]) == (70, 10, 10)
    assert second["bytes_stored"] < second["bytes"] / 2 and second["change"]["shards_rewritten"] == 1
    third = job("day3", "gone", "delete")
    assert (third["samples"], third["change"]["deleted"], third["change"]["absent"]) == (67, 3, 0)
    keys = sorted(spark_webdataset.open(str(root / "versions" / "day3")).keys())
    assert keys == [f"{i:04d}" for i in range(70) if not 55 <= i < 58]
    assert (
        main(
            [
                "--source",
                str(tmp_path / "gone"),
                "--output",
                str(root),
                "--version",
                "x",
                "--change",
                "delete",
                "--key",
                "id",
            ]
        )
        == 2
    )  # fmt: skip  (a change needs --parent: bad input)


def test_full_validation_opens_referenced_shards_and_finds_a_change_the_report_cannot(spark, tmp_path) -> None:
    root = str(tmp_path / "data")
    _write(spark, root, "v1", {f"k{i:04d}": f"text {i}" for i in range(60)}, None, None)
    _publish(root, "v1")
    _write(spark, root, "v2", {"k0005": "new", "k0100": "added"}, "v1", "upsert")
    child = f"{root}/versions/v2"
    with opened_files(f"{root}/versions/v1") as opened:
        full = validate_version(child, full=True, workers=1)
    assert full.ok, full.errors
    assert {name for name in opened if name.endswith(".tar")} == {"shard-000001.tar", "shard-000002.tar"}
    assert {row["name"] for row in full.shards} >= {"../v1/shard-000001.tar", "../v1/shard-000002.tar"}
    # a byte flipped under a parent report from before reports kept storage identities: size and
    # crc32c from the report still agree, but with no identity to trust the shard is read and fails
    report_path = Path(root, "versions", "v1", "_validation.json")
    older = json.loads(report_path.read_text())
    for row in older["shards"]:
        row.pop("identity")
    report_path.write_text(json.dumps(older))
    shard = Path(root, "versions", "v1", "shard-000002.tar")
    data = bytearray(shard.read_bytes())
    data[700] ^= 1
    shard.write_bytes(bytes(data))
    assert not validate_version(child, write_report=False).ok
    found = validate_version(child, full=True, workers=1, write_report=False)
    assert not found.ok and any(e["shard"] == "../v1/shard-000002.tar" for e in found.errors), found.errors


def test_a_delete_of_every_sample_of_a_shard_drops_the_shard_and_names_continue_after_the_highest(
    spark, tmp_path
) -> None:
    root = str(tmp_path / "data")
    _write(spark, root, "v1", {f"k{i:04d}": f"text {i}" for i in range(60)}, None, None)  # 3 shards
    _publish(root, "v1")
    _delete(spark, root, "v2", [f"k{i:04d}" for i in range(20, 40)] + ["k0000"], "v1")
    _publish(root, "v2")
    _, m2 = Dataset(root).published("v2")
    assert (m2.run["change"]["shards_emptied"], m2.run["change"]["shards_rewritten"]) == (1, 1)
    assert [s.location for s in m2.shards] == ["shard-000003.tar", "../v1/shard-000002.tar"]
    _write(spark, root, "v3", {"k0001": "new", "k0500": "added"}, "v2", "upsert")  # touches v2's own rewrite
    _publish(root, "v3")
    _, m3 = Dataset(root).published("v3")
    assert [s.location for s in m3.shards] == ["shard-000005.tar", "../v1/shard-000002.tar", "shard-000004.tar"]
    wanted = {f"k{i:04d}": f"text {i}".encode() for i in [*range(2, 20), *range(40, 60)]}
    assert _reads_of_every_reader(spark, root, "v3") == {**wanted, "k0001": b"new", "k0500": b"added"}


def test_a_days_upsert_and_delete_are_two_commits_of_one_version(spark, tmp_path) -> None:
    root = str(tmp_path / "data")
    _write(spark, root, "v1", {f"k{i:04d}": f"text {i}" for i in range(60)}, None, None)
    _publish(root, "v1")
    _write(spark, root, "v2", {"k0005": "new 5", "k0070": "added"}, "v1", "upsert")
    _delete(spark, root, "v2", ["k0006", "k0045"], "v1", mode="append")  # the same parent: onto v2's first commit
    _publish(root, "v2")
    _, m2 = Dataset(root).published("v2")
    assert m2.parent == "v1" and m2.run["commits"] == 2 and m2.run["change"]["deleted"] == 2
    assert [(c["change"], c["replaced"], c["added"], c["deleted"]) for c in m2.run["changes"]] == [
        ("upsert", 1, 1, 0),
        ("delete", 0, 0, 2),
    ]
    stored = sorted(p.name for p in Path(root, "versions", "v2").glob("*.tar"))
    assert stored == sorted(s.name for s in m2.own_shards)  # the first commit's rewrite, rewritten again, is gone
    wanted = {f"k{i:04d}": f"text {i}".encode() for i in range(60) if i not in (5, 6, 45)}
    assert _reads_of_every_reader(spark, root, "v2") == {**wanted, "k0005": b"new 5", "k0070": b"added"}
