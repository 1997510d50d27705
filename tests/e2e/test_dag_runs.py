"""Real runs of the dataset DAGs (dag.test(), real spark-submit on local Spark): webdataset__digits from
datasets/digits.yaml, and DAGs of configs the tests write. The run that checks Params, key order, wids
and the Asset event is in test_installed_wheel.py, on the installed wheel."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_webdataset import fault_points as faults
from spark_webdataset.dataset.catalog import describe
from spark_webdataset.dataset.publish import PublishRefused, publish, read_latest
from spark_webdataset.dataset.validate import validate_version
from tests.support import REPO
from tests.support.dataset_dags import dagbag_of, dataset_dag, write_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def build_dag(airflow_db):
    """The demo's DAG as Airflow parses it from the repository's datasets/ folder (conftest points there)."""
    return dataset_dag("digits")


def config_dag(folder: Path, name: str, monkeypatch, **fields):
    """The DAG of a config written for this test (a run's Params cannot move the root: the config gives it)."""
    write_config(folder, name, **fields)
    monkeypatch.setenv("SPARK_WEBDATASET_DATASETS", str(folder))
    return dataset_dag(name)


def run(dag, run_conf: dict, logical_date: datetime.datetime | None, run_after: datetime.datetime | None = None):
    return dag.test(run_conf=run_conf, logical_date=logical_date, run_after=run_after)


def day(n: int) -> datetime.datetime:
    return datetime.datetime(2026, 11, n, tzinfo=datetime.timezone.utc)


def published_events(dag_id: str) -> list:
    """Every Asset event the DAG's runs wrote, oldest first, as a consumer task receives them (extra, timestamp)."""
    from types import SimpleNamespace

    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetEvent).where(AssetEvent.source_dag_id == dag_id).order_by(AssetEvent.timestamp)
        return [SimpleNamespace(extra=dict(e.extra), timestamp=e.timestamp) for e in session.scalars(query)]


def test_plan_task_takes_the_version_from_the_logical_date_else_run_after(build_dag) -> None:
    """The DAG's own plan callable, without a run: which of the run's dates it hands to plan_run."""
    from types import SimpleNamespace

    plan = build_dag.get_task("plan").python_callable
    params = {**{name: param.value for name, param in build_dag.params.items()}, "version": None}
    logical, after = datetime.datetime(2026, 11, 14, 6, 30, tzinfo=datetime.timezone.utc), day(28)
    assert plan(params=params, dag_run=SimpleNamespace(logical_date=logical, run_after=after))["version"] == (
        "20261114T063000Z"
    )
    assert plan(params=params, dag_run=SimpleNamespace(logical_date=None, run_after=after))["version"] == (
        "20261128T000000Z"
    )
    # bad Params fail the task at once: a retry would get the same Params
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="param 'version'"):
        plan(params={**params, "version": "../x"}, dag_run=SimpleNamespace(logical_date=logical, run_after=after))


def test_a_config_file_gives_a_dag_that_backfills_two_dates_out_of_order_and_reruns_one(
    airflow_db, digits_source, tmp_path, monkeypatch
) -> None:
    """No Params at all: everything the runs do comes from the YAML file."""
    root = tmp_path / "root"
    write_config(
        tmp_path / "datasets", "numbers", source=digits_source, root=str(root), key="format_string('%05d', id)",
        fields={"png": "image", "cls": "label", "json": "meta"}, max_shard_bytes="512KiB", schedule="@daily",
        start_date="2026-11-01", validation={"required_fields": ["png", "cls"]},
    )  # fmt: skip
    monkeypatch.setenv("SPARK_WEBDATASET_DATASETS", str(tmp_path / "datasets"))
    dag = dataset_dag("numbers")
    for n in (2, 1):  # out of order, as backfills and late re-runs come
        assert run(dag, {}, day(n)).state == "success"
    description = describe(str(root))
    versions = [v["version"] for v in description["versions"] if v["published"]]
    assert versions == ["20261101T000000Z", "20261102T000000Z"]
    assert description["latest"] == "20261102T000000Z"  # the later date, though published first
    for version in versions:  # the config's max_shard_bytes (512KiB), not the job's default (3GiB), cut them
        document = json.loads((root / "versions" / version / "_manifest.json").read_text())
        assert document["options"]["maxShardBytes"] == 512 * 1024
        assert [field["name"] for field in document["fields"]] == ["png", "cls", "json"]
        assert all(s["bytes"] <= 512 * 1024 for s in document["shards"]) and len(document["shards"]) >= 11
        report = json.loads((root / "versions" / version / "_validation.json").read_text())
        assert report["ok"]
    shards_before = sorted((root / "versions" / "20261101T000000Z").iterdir())
    stamps = [p.stat().st_mtime_ns for p in shards_before]
    assert run(dag, {}, day(1)).state == "success"
    assert read_latest(str(root)) == "20261102T000000Z"
    assert [p.stat().st_mtime_ns for p in shards_before] == stamps  # published: untouched

    # the example consumer on these three publish events: one task reads every version named, the other LATEST
    events = published_events("webdataset__numbers")
    assert [event.extra["version"] for event in events] == ["20261102T000000Z", "20261101T000000Z", "20261101T000000Z"]
    consumer = dagbag_of(REPO / "dags" / "consume_webdataset.py").dags["consume_webdataset"]
    triggering = {"webdataset_numbers": events}
    each = consumer.get_task("read_each_published_version").python_callable(triggering_asset_events=triggering)
    assert [(r["version"], r["samples"]) for r in each] == [
        ("20261102T000000Z", 1797), ("20261101T000000Z", 1797), ("20261101T000000Z", 1797),
    ]  # fmt: skip
    latest = consumer.get_task("read_latest_version").python_callable(triggering_asset_events=triggering)
    assert latest == [{"version": "20261102T000000Z", "samples": 1797}]

    # the config's required fields reach validation: an unpublished copy lacks 'txt', which a stricter
    # config requires; its DAG's validate task fails at once (no retry can add the field)
    from airflow.sdk.exceptions import AirflowFailException

    copy = tmp_path / "copy" / "versions" / "v1"
    shutil.copytree(root / "versions" / "20261101T000000Z", copy)
    for name in ("_SEALED", "_validation.json", "shardindex.json"):
        (copy / name).unlink(missing_ok=True)
    write_config(
        tmp_path / "datasets", "strict", source=digits_source, root=str(tmp_path / "copy"), key="id",
        fields={"png": "image", "cls": "label", "txt": "'caption'"}, validation={"required_fields": ["txt"]},
    )  # fmt: skip
    validate = dataset_dag("strict").get_task("validate").python_callable
    planned = {"root": str(tmp_path / "copy"), "version": "v1", "version_uri": str(copy)}
    with pytest.raises(AirflowFailException, match="txt"):
        validate(planned)
    assert json.loads((copy / "_validation.json").read_text())["ok"] is False


def test_spark_job_killed_mid_write_leaves_no_visible_version(airflow_db, digits_source, tmp_path, monkeypatch) -> None:
    root = tmp_path / "root"
    version_dir = root / "versions" / "killed"
    command = [
        str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
        str(REPO / "jobs" / "build_webdataset.py"), "--source", digits_source, "--output", str(root),
        "--version", "killed", "--key", "format_string('%06d', id)", "--field", "png=image",
        "--field", "cls=label", "--max-shard-bytes", "64KiB",
    ]  # fmt: skip
    # each task stops after its first batch: killed mid-write
    with faults.installed({"task:batch-written": {"action": "sleep", "seconds": 600, "attempts": [0]}}):
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
    with pytest.raises(PublishRefused):
        publish(str(root), "killed")
    assert not (root / "_published").exists()

    dag = config_dag(
        tmp_path / "datasets", "killed_write", monkeypatch, source=digits_source, root=str(root),
        key="format_string('%06d', id)", fields={"png": "image", "cls": "label"}, max_shard_bytes="64KiB",
    )  # fmt: skip
    assert run(dag, {"version": "killed"}, day(20)).state == "success"
    assert read_latest(str(root)) == "killed"
    assert json.loads((root / "_published" / "killed.json").read_text())["samples"] == 1797
    assert not (version_dir / "_staging").exists()
    assert validate_version(str(version_dir), write_report=False).ok


def test_bad_input_fails_the_spark_task_on_its_first_try_with_the_reason(
    airflow_db, tmp_path, capfd, monkeypatch
) -> None:
    missing = tmp_path / "no-such-source"
    root = str(tmp_path / "root")
    dag = config_dag(tmp_path / "datasets", "bad_input", monkeypatch, source=str(missing), root=root, key="id")
    dag_run = run(dag, {}, day(21))
    assert dag_run.state == "failed"
    states = {ti.task_id: (ti.state, ti.try_number) for ti in dag_run.get_task_instances()}
    assert states["plan"] == ("success", 1)
    assert states["write_shards"] == ("failed", 1)  # retries: 2, yet no retry: the job said its input is bad
    assert states["validate"][0] == states["publish"][0] == "upstream_failed"
    # the task log says why: the job's own error line, carried by the failure
    captured = capfd.readouterr()
    reasons = [line for line in (captured.out + captured.err).splitlines() if "rejected its input" in line]
    assert reasons and "PATH_NOT_FOUND" in reasons[0] and str(missing) in reasons[0], reasons
    assert not (tmp_path / "root" / "_published").exists()


def spark_job(tmp_path: Path, exit_code: int, message: str):
    """The DAG's Spark operator on a real spark-submit of a script that prints `message` and exits."""
    from spark_webdataset.airflow.dags import SparkJobOperator

    script = tmp_path / f"exit_{exit_code}.py"
    script.write_text(f"import sys\nprint({message!r}, file=sys.stderr)\nsys.exit({exit_code})\n")
    return SparkJobOperator(task_id=f"exit_{exit_code}", conn_id="spark_default", application=str(script))


def test_only_bad_input_skips_the_retries(airflow_db, tmp_path) -> None:
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    with pytest.raises(AirflowFailException) as bad_input:
        spark_job(tmp_path, 2, "build_webdataset: error: key column 'uid' not found").execute({})
    assert str(bad_input.value) == (
        "the Spark job rejected its input (exit code 2), so no retry can help: "
        "build_webdataset: error: key column 'uid' not found"
    )
    with pytest.raises(AirflowException) as transient:
        spark_job(tmp_path, 1, "build_webdataset: error: executor lost").execute({})
    assert not isinstance(transient.value, AirflowFailException)  # Airflow retries this one
    assert "Error code is: 1" in str(transient.value)
