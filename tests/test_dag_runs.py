"""Real runs of the build_webdataset DAG (dag.test(), real spark-submit on local Spark)."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_webdataset.catalog import describe
from spark_webdataset.publish import PublishError, publish, read_latest
from spark_webdataset.validate import validate_version

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def build_dag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags" / "build_webdataset.py")).dags["build_webdataset"]


def conf(source: str, root: Path, **extra) -> dict:
    return {"source": source, "output_root": str(root), "max_shard_bytes": "512KiB", **extra}


def run(dag, run_conf: dict, logical_date: datetime.datetime | None):
    return dag.test(run_conf=run_conf, logical_date=logical_date)


def day(n: int) -> datetime.datetime:
    return datetime.datetime(2026, 11, n, tzinfo=datetime.timezone.utc)


def test_dag_run_publishes_a_version_wids_can_read(build_dag, digits_source, tmp_path) -> None:
    import wids

    root = tmp_path / "root"
    dag_run = run(build_dag, conf(digits_source, root), None)  # a manual run: no logical date
    assert dag_run.state == "success"
    latest = read_latest(str(root))
    assert latest and latest.endswith("Z")  # derived from run_after
    index = root / "versions" / latest / "shardindex.json"
    dataset = wids.ShardListDataset(str(index), transformations=[], cache_dir=str(tmp_path / "cache"))
    source_rows = sum(pq.read_metadata(p).num_rows for p in Path(digits_source).glob("*.parquet"))
    assert len(dataset) == source_rows
    sample = dataset[len(dataset) - 1]
    assert sample[".png"].read().startswith(b"\x89PNG")
    shards = json.loads(index.read_text())["shardlist"]
    assert sum(s["nsamples"] for s in shards) == 1797
    # what the example consumer DAG does with the publish task's Asset event
    from spark_webdataset.consumer import read_published

    published = dag_run.get_task_instance("publish").xcom_pull(task_ids="publish")
    extra = {key: published[key] for key in ("version", "uri", "samples", "shards", "bytes")}
    assert read_published({**extra, "index": published["index_uri"]}) == {"version": latest, "samples": 1797}


def test_backfill_of_three_dates_and_rerun_of_an_old_one(build_dag, digits_source, tmp_path) -> None:
    root = tmp_path / "root"
    for n in (2, 3, 1):  # out of order, as backfills and late re-runs come
        assert run(build_dag, conf(digits_source, root), day(n)).state == "success"
    description = describe(str(root))
    versions = [v["version"] for v in description["versions"] if v["published"]]
    assert versions == ["20261101T000000Z", "20261102T000000Z", "20261103T000000Z"]
    assert description["latest"] == "20261103T000000Z"
    shards_before = sorted((root / "versions" / "20261101T000000Z").iterdir())
    stamps = [p.stat().st_mtime_ns for p in shards_before]
    assert run(build_dag, conf(digits_source, root), day(1)).state == "success"
    assert read_latest(str(root)) == "20261103T000000Z"
    assert [p.stat().st_mtime_ns for p in shards_before] == stamps  # published: untouched


def big_source(directory: Path, rows: int = 6000, payload: int = 64 * 1024) -> str:
    directory.mkdir(parents=True)
    per_file = rows // 4
    for part in range(4):
        ids = range(part * per_file, (part + 1) * per_file)
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "image": pa.array([os.urandom(payload) for _ in ids], pa.binary()),
                "label": pa.array([i % 10 for i in ids], pa.int64()),
            }
        )
        pq.write_table(table, directory / f"part-{part}.parquet", compression="none")
    return str(directory)


def test_spark_job_killed_mid_write_leaves_no_visible_version(build_dag, tmp_path) -> None:
    source = big_source(tmp_path / "source")
    root = tmp_path / "root"
    version_dir = root / "versions" / "killed"
    command = [
        str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
        str(REPO / "jobs" / "build_webdataset.py"), "--source", source, "--output", str(root),
        "--version", "killed", "--key", "format_string('%06d', id)", "--field", "bin=image",
        "--field", "cls=label", "--max-shard-bytes", "16MiB",
    ]  # fmt: skip
    job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 240
    try:
        while not list(version_dir.glob("_staging/*/*/*.tar")):
            assert job.poll() is None, "the job ended before it was killed"
            assert time.monotonic() < deadline, "no staged shard appeared"
            time.sleep(0.05)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert not (version_dir / "_manifest.json").exists()
    assert not validate_version(str(version_dir), write_report=False).ok
    with pytest.raises(PublishError):
        publish(str(root), "killed")
    assert not (root / "_published").exists()

    fields = ["bin=image", "cls=label"]
    extra = {"version": "killed", "key": "format_string('%06d', id)", "fields": fields, "max_shard_bytes": "16MiB"}
    assert run(build_dag, conf(source, root, **extra), day(20)).state == "success"
    assert read_latest(str(root)) == "killed"
    assert json.loads((root / "_published" / "killed.json").read_text())["samples"] == 6000
    assert not (version_dir / "_staging").exists()
    assert validate_version(str(version_dir), write_report=False).ok
