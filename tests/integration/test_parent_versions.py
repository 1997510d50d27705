"""Versions built on a published parent (issue 22, first part): the parent's shards are referenced,
not copied, and every reader follows the references.

A chain v1 <- v2 <- v3 of appends (option parent), on local disk and on the GCS emulator: each version
reads exactly its samples through our reader, `open()`, webdataset and wids (both through the
version's shardindex.json, whose referenced shards are `../<version>/shard-*.tar`); no shard is
copied; an append of a key the parent holds fails with nothing visible; validation proves a
referenced shard unchanged without reading it and names the shard and the version that stores it
when it changed.
"""

from __future__ import annotations

import json

import pytest

import spark_webdataset
from spark_webdataset.dataset.catalog import describe, format_description
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import DuplicateKey, from_spark
from spark_webdataset.storage import storage_for

pytestmark = pytest.mark.slow


def _frame(spark, start: int, count: int):
    return (
        spark.range(start, start + count)
        .selectExpr(
            "format_string('k%05d', id) AS __key__", "concat('text ', id) AS txt", "CAST(id % 10 AS INT) AS cls"
        )
        .repartition(2)
    )


def _build(spark, root: str, version: str, start: int, count: int, parent: str | None) -> None:
    writer = _frame(spark, start, count).write.format("webdataset").option("maxSamplesPerShard", "40")
    if parent is not None:
        writer = writer.option("parent", parent)
    writer.mode("overwrite").save(f"{root}/versions/{version}")
    assert validate_version(f"{root}/versions/{version}").ok
    publish(root, version)


def _keys_by_reader(spark, uri: str) -> list[str]:
    return sorted(row[0] for row in spark.read.format("webdataset").load(uri).select("__key__").collect())


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_a_chain_of_appends_references_its_parents_shards_and_every_reader_follows(
    spark, tmp_path, where, request
) -> None:
    base = request.getfixturevalue("bucket") if where == "gcs" else str(tmp_path)
    root = f"{base}/data"
    storage = storage_for(root)
    _build(spark, root, "v1", 0, 100, None)
    _build(spark, root, "v2", 100, 60, "LATEST")
    _build(spark, root, "v3", 160, 30, "v2")
    dataset = Dataset(root)
    _, m1 = dataset.published("v1")
    _, m2 = dataset.published("v2")
    _, m3 = dataset.published("v3")
    assert m2.parent == "v1" and m3.parent == "v2"
    assert [s.version for s in m2.shards if s.version] == ["v1"] * len(m1.shards)
    # references name the version that stores the bytes, never a copy in between
    assert {s.version for s in m3.shards if s.version} == {"v1", "v2"}
    stored = {
        version: sorted(n for n in storage.list_sizes(f"{root}/versions/{version}") if n.endswith(".tar"))
        for version in ("v1", "v2", "v3")
    }
    assert len(stored["v2"]) == len(m2.own_shards) and len(stored["v3"]) == len(m3.own_shards)  # nothing copied
    expected = {"v1": 100, "v2": 160, "v3": 190}
    for version, count in expected.items():
        uri = f"{root}/versions/{version}"
        keys = [f"k{i:05d}" for i in range(count)]
        assert _keys_by_reader(spark, uri) == keys
        samples = spark_webdataset.open(uri)
        assert list(samples.keys()) == keys and samples.get(keys[7])["txt"] == b"text 7"
        assert samples.get(keys[-1])["txt"] == f"text {count - 1}".encode()
    assert _keys_by_reader(spark, root) == [f"k{i:05d}" for i in range(190)]  # LATEST is v3
    described = {v["version"]: v for v in describe(root)["versions"]}  # inspect --json: what each costs
    assert (described["v3"]["parent"], described["v3"]["bytes_stored"]) == ("v2", sum(s.bytes for s in m3.own_shards))
    assert described["v3"]["bytes_referenced"] == sum(s.bytes for s in m3.shards if s.version)
    assert described["v1"]["parent"] is None and described["v1"]["bytes_referenced"] == 0
    assert "on v2:" in format_description(describe(root))
    index = json.loads(storage.read_bytes(f"{root}/versions/v3/shardindex.json"))
    urls = [entry["url"] for entry in index["shardlist"]]
    assert any(url.startswith("../v1/shard-") for url in urls) and any(url.startswith("../v2/shard-") for url in urls)
    assert sum(entry["nsamples"] for entry in index["shardlist"]) == 190
    if where == "local":  # webdataset and wids through the index, with no knowledge of parents
        import webdataset as wds
        import wids

        ds = wids.ShardListDataset(f"{root}/versions/v3/shardindex.json")
        assert sorted(ds[i]["__key__"] for i in range(len(ds))) == [f"k{i:05d}" for i in range(190)]
        base_dir = f"{root}/versions/v3"
        shards = [f"{base_dir}/{url}" for url in urls]
        assert sorted(s["__key__"] for s in wds.WebDataset(shards, shardshuffle=False)) == [
            f"k{i:05d}" for i in range(190)
        ]


def test_an_append_of_a_key_the_parent_holds_fails_with_nothing_visible(spark, tmp_path) -> None:
    root = str(tmp_path / "data")
    _build(spark, root, "v1", 0, 50, None)
    with pytest.raises(Exception) as caught:
        _frame(spark, 45, 10).write.format("webdataset").option("parent", "v1").mode("overwrite").save(
            f"{root}/versions/v2"
        )
    assert isinstance(from_spark(caught.value), DuplicateKey) and "k00045" in str(caught.value)
    assert not (tmp_path / "data" / "versions" / "v2" / "_manifest.json").exists()


def test_validation_names_a_referenced_shard_that_changed_and_the_version_storing_it(spark, tmp_path) -> None:
    root = tmp_path / "data"
    _build(spark, str(root), "v1", 0, 80, None)
    child = root / "versions" / "v2"
    _frame(spark, 80, 20).write.format("webdataset").option("parent", "v1").mode("overwrite").save(str(child))
    assert validate_version(str(child)).ok
    report_path = root / "versions" / "v1" / "_validation.json"
    recorded = report_path.read_text()
    older = json.loads(recorded)  # a report from before reports recorded identities: size and crc32c prove it
    for row in older["shards"]:
        row.pop("identity")
    report_path.write_text(json.dumps(older))
    assert validate_version(str(child)).ok
    report_path.write_text(recorded)
    shard = sorted((root / "versions" / "v1").glob("shard-*.tar"))[0]
    data = bytearray(shard.read_bytes())
    data[600] ^= 1  # one byte, same size: its identity moved, so validation reads it and its crc32c differs
    shard.write_bytes(bytes(data))
    report = validate_version(str(child))
    assert not report.ok
    assert any(f"shard {shard.name} of version v1" in e["error"] and e["shard"] == f"../v1/{shard.name}"
               for e in report.errors), report.errors  # fmt: skip


def test_the_build_job_builds_on_latest_and_a_first_run_with_no_parent_is_full(spark, tmp_path) -> None:
    from spark_webdataset.jobs.build import build, parser

    for name, (start, end) in {"day1": (0, 70), "day2": (70, 100)}.items():
        spark.range(start, end).selectExpr("id", "CAST(id % 10 AS INT) AS label").write.parquet(str(tmp_path / name))
    root = tmp_path / "root"

    def job(day: str) -> dict:
        args = ["--source", str(tmp_path / day), "--output", str(root), "--version", day, "--parent", "LATEST",
                "--key", "format_string('%04d', id)", "--field", "cls=label", "--max-samples-per-shard", "20"]  # fmt: skip
        summary = build(spark, parser().parse_args(args))
        assert validate_version(str(root / "versions" / day)).ok
        publish(str(root), day)
        return summary

    assert job("day1")["samples"] == 70  # nothing published yet: a full build
    assert job("day2")["samples"] == 100
    _, manifest = Dataset(str(root)).published("day2")
    assert manifest.parent == "day1" and sum(s.samples for s in manifest.own_shards) == 30
    assert sum(p.stat().st_size for p in (root / "versions" / "day2").glob("shard-*.tar")) == sum(
        s.bytes for s in manifest.own_shards
    )  # the day's shards only


def test_the_view_shows_the_parent_and_previews_referenced_shards(spark, tmp_path) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from spark_webdataset.airflow.ui.app import create_app
    from tests.support.webdataset_ui_data import write_digits_config

    root = tmp_path / "data"
    _build(spark, str(root), "v1", 0, 60, None)
    _build(spark, str(root), "v2", 60, 20, "v1")
    write_digits_config(tmp_path / "datasets", "chain", root)
    app = create_app(tmp_path / "datasets")
    app.dependency_overrides[app.state.user_dependency] = lambda: "tester"
    client = TestClient(app)
    page = client.get("/datasets/chain/versions/v2")
    assert page.status_code == 200 and 'id="parent"' in page.text and "Built on" in page.text
    first = client.get("/api/datasets/chain/versions/v2/preview?n=64").json()  # starts in v1's shards
    assert first["count"] == 64 and first["errors"] == [] and first["samples"][0]["shard"].startswith("../v1/")
    referenced = first["samples"][0]["shard"]
    one = client.get("/api/datasets/chain/versions/v2/preview", params={"n": 3, "shard": referenced}).json()
    assert one["count"] == 3 and {s["shard"] for s in one["samples"]} == {referenced}
    by_key = client.get("/api/datasets/chain/versions/v2/preview?mode=key&key=k00005").json()
    assert [s["key"] for s in by_key["samples"]] == ["k00005"] and by_key["samples"][0]["shard"].startswith("../v1/")
    assert (
        client.get("/api/datasets/chain/versions/v2/preview", params={"shard": "../../x/shard-000000.tar"}).status_code
        == 400
    )
