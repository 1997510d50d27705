"""s3:// end to end on the S3 server (moto): a DAG run (dag.test()) writes, validates and publishes to a bucket,
and the example consumer DAG's tasks read what it published (wids through our Storage, no aws CLI)."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.slow


def test_dag_run_to_s3(s3_bucket, digits_source, airflow_db, tmp_path, monkeypatch) -> None:
    """A config whose root is s3://: its DAG writes, validates and publishes there, and its Asset is the root."""
    import datetime

    from spark_webdataset.dataset.catalog import describe
    from tests.support.dataset_dags import dataset_dag, write_config

    root = f"{s3_bucket}/digits"
    # its own dataset name: Airflow refuses one Asset name for two roots (the repo's digits is another)
    write_config(
        tmp_path / "datasets", "digits_s3", source=digits_source, root=root, key="format_string('%05d', id)",
        fields={"png": "image", "cls": "label", "json": "meta"}, max_shard_bytes="512KiB",
    )  # fmt: skip
    monkeypatch.setenv("SPARK_WEBDATASET_DATASETS", str(tmp_path / "datasets"))
    dag = dataset_dag("digits_s3")
    [outlet] = dag.get_task("publish").outlets
    assert outlet.uri == root
    run = dag.test(logical_date=datetime.datetime(2026, 11, 7, tzinfo=datetime.timezone.utc))
    assert run.state == "success"
    description = describe(root)
    assert description["latest"] == "20261107T000000Z"
    [entry] = description["versions"]
    assert entry["published"] and entry["validated"] and entry["samples"] == 1797

    # the example consumer on the run's Asset event, with an `aws` first on PATH that records any call and fails
    from tests.support import REPO
    from tests.support.dataset_dags import dagbag_of

    stub, calls = tmp_path / "stub-bin", tmp_path / "aws-calls"
    stub.mkdir()
    (stub / "aws").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 1\n')
    (stub / "aws").chmod(0o755)
    monkeypatch.setenv("PATH", f"{stub}:{os.environ['PATH']}")
    monkeypatch.setenv("WIDS_CACHE", str(tmp_path / "wids-cache"))
    events = _published_events(dag.dag_id)
    assert [event.extra["version"] for event in events] == ["20261107T000000Z"]
    assert events[0].extra["index"].startswith(f"{root}/versions/")
    consumer = dagbag_of(REPO / "dags" / "consume_webdataset.py").dags["consume_webdataset"]
    triggering = {"webdataset_digits_s3": events}
    each = consumer.get_task("read_each_published_version").python_callable(triggering_asset_events=triggering)
    assert each == [{"version": "20261107T000000Z", "samples": 1797}]
    latest = consumer.get_task("read_latest_version").python_callable(triggering_asset_events=triggering)
    assert latest == [{"version": "20261107T000000Z", "samples": 1797}]
    assert not calls.exists(), f"the aws CLI ran: {calls.read_text()}"


def _published_events(dag_id: str) -> list:
    """The Asset events the DAG's runs wrote, oldest first, as a consumer task receives them (extra, timestamp)."""
    from types import SimpleNamespace

    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetEvent).where(AssetEvent.source_dag_id == dag_id).order_by(AssetEvent.timestamp)
        return [SimpleNamespace(extra=dict(e.extra), timestamp=e.timestamp) for e in session.scalars(query)]
