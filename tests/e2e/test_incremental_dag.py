"""Real runs (dag.test(), real spark-submit on local Spark) of a dataset whose config builds each date as
an upsert on the version published before it and keeps the last two versions (`retention:`, gc after
publish): the chain is published with its parents, each version stores about its change, the gc of
the third run retires the first version and deletes the shards nobody references, every kept version
reads back exactly, and the Asset events carry the cost."""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spark_webdataset
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.format.manifest import Manifest
from tests.support.dataset_dags import dataset_dag, write_config

pytestmark = pytest.mark.slow

DAYS = [datetime.datetime(2026, 12, n, tzinfo=datetime.timezone.utc) for n in (1, 2, 3)]
IDS = [day.strftime("%Y%m%dT%H%M%SZ") for day in DAYS]
PAD = "x" * 400  # ~0.5 KiB a sample: 60 samples in shards of 5


def _text(day: int, i: int) -> str:
    return f"day {day} sample {i} {PAD}"


# what each date's source holds: the first all 60 samples, then a few replaced and a few new
CHANGES = {
    1: {f"k{i:03d}": _text(1, i) for i in range(60)},
    2: {**{f"k{i:03d}": _text(2, i) for i in (0, 1, 2)}, "k060": _text(2, 60), "k061": _text(2, 61)},
    3: {**{f"k{i:03d}": _text(3, i) for i in (30, 31, 60)}, "k062": _text(3, 62)},
}


def _write_sources(folder: Path) -> None:
    for day, rows in CHANGES.items():
        directory = folder / f"2026-12-{day:02d}"
        directory.mkdir(parents=True)
        table = pa.table({"id": list(rows), "txt": list(rows.values())})
        pq.write_table(table, directory / "part-0.parquet")


def _events(dag_id: str) -> list[dict]:
    """The extras of the Asset events the DAG's runs wrote, oldest first."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetEvent).where(AssetEvent.source_dag_id == dag_id).order_by(AssetEvent.timestamp)
        return [dict(event.extra) for event in session.scalars(query)]


def _read_back(root: Path, version: str) -> dict[str, str]:
    samples = spark_webdataset.open(str(root / "versions" / version))
    return {key: samples.get(key)["txt"].decode() for key in samples.keys()}


def test_three_dates_of_upserts_publish_a_chain_and_gc_keeps_the_last_two(airflow_db, tmp_path, monkeypatch) -> None:
    _write_sources(tmp_path / "raw")
    root = tmp_path / "root"
    write_config(
        tmp_path / "datasets", "changing", source=str(tmp_path / "raw" / "{ds}"), root=str(root), key="id",
        fields={"txt": "txt"}, max_samples_per_shard=5, order="key", schedule="@daily", start_date="2026-12-01",
        build={"change": "upsert", "parent": "LATEST"}, retention={"keep_last": 2, "min_age": "0s"},
    )  # fmt: skip
    monkeypatch.setenv("SPARK_WEBDATASET_DATASETS", str(tmp_path / "datasets"))
    dag = dataset_dag("changing")
    assert "gc" in dag.task_ids

    expected: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for day, (logical_date, version) in enumerate(zip(DAYS, IDS), start=1):
        dag_run = dag.test(logical_date=logical_date)
        assert dag_run.state == "success", {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
        current = {**current, **CHANGES[day]}
        expected[version] = dict(current)

    dataset = Dataset(str(root))
    manifests = {version: dataset.version(version).read_manifest() for version in IDS[1:]}
    assert [manifests[IDS[1]].parent, manifests[IDS[2]].parent] == [IDS[0], IDS[1]]
    assert dataset.read_latest() == IDS[2]

    # each version stores its change, not the dataset: the rest is referenced
    for version in IDS[1:]:
        manifest = manifests[version]
        stored = sum(shard.bytes for shard in manifest.own_shards)
        assert stored < manifest.bytes / 2, (version, stored, manifest.bytes)
        assert manifest.run["change"]["change"] == "upsert"
    assert {k: manifests[IDS[1]].run["change"][k] for k in ("replaced", "added")} == {"replaced": 3, "added": 2}
    assert {k: manifests[IDS[2]].run["change"][k] for k in ("replaced", "added")} == {"replaced": 3, "added": 1}

    # the third run's gc retired the first version: no record, and only the shards kept versions use stay
    assert dataset.published_ids() == IDS[1:]
    referenced = {shard.name for manifest in manifests.values() for shard in manifest.shards if shard.version == IDS[0]}
    first = root / "versions" / IDS[0]
    left = {path.name for path in first.glob("*.tar")}
    assert (first / "_RETIRED").exists() and (first / "_manifest.json").exists()  # the proof of what stays
    written = Manifest.from_json((first / "_manifest.json").read_bytes()).shards
    assert left == referenced and len(referenced) < len(written)  # the shards rewritten by run 2 are gone
    for version in IDS[1:]:  # kept versions read back exactly
        assert _read_back(root, version) == expected[version]
    assert _read_back(root, IDS[2])["k060"] == _text(3, 60)

    # the Asset events carry the cost of each version, and what gc would free at the time
    extras = _events("webdataset__changing")
    assert [extra["version"] for extra in extras] == IDS
    assert extras[0]["parent"] is None and "change" not in extras[0]
    assert extras[0]["bytes_stored"] == extras[0]["bytes"] and extras[0]["bytes_referenced"] == 0
    for extra, version in zip(extras[1:], IDS[:2]):
        assert extra["parent"] == version
        assert extra["bytes_stored"] + extra["bytes_referenced"] == extra["bytes"]
        assert extra["bytes_stored"] < extra["bytes"] / 2
        assert extra["change"]["change"] == "upsert" and extra["change"]["replaced"] == 3
    assert extras[1]["gc_would_free"] == 0  # two versions, keep_last 2
    assert extras[2]["gc_would_free"] > 0  # the first one's record and its rewritten shards
    assert all("shardlist" not in extra and "shards_list" not in extra for extra in extras)  # small
