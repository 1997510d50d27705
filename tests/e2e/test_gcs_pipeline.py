"""gs:// end to end on the emulator: a DAG run (dag.test()) writes, validates and publishes to a bucket."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_dag_run_to_gcs(bucket, digits_source, airflow_db, tmp_path, monkeypatch) -> None:
    """A config whose root is gs://: its DAG writes, validates and publishes there, and its Asset is the root."""
    import datetime

    from spark_webdataset.dataset.catalog import describe
    from tests.support.dataset_dags import dataset_dag, write_config

    root = f"{bucket}/digits"
    # its own dataset name: Airflow refuses one Asset name for two roots (the repo's digits is another)
    write_config(
        tmp_path / "datasets", "digits_gcs", source=digits_source, root=root, key="format_string('%05d', id)",
        fields={"png": "image", "cls": "label", "json": "meta"}, max_shard_bytes="512KiB",
    )  # fmt: skip
    monkeypatch.setenv("SPARK_WEBDATASET_DATASETS", str(tmp_path / "datasets"))
    dag = dataset_dag("digits_gcs")
    [outlet] = dag.get_task("publish").outlets
    assert outlet.uri == root
    run = dag.test(logical_date=datetime.datetime(2026, 11, 7, tzinfo=datetime.timezone.utc))
    assert run.state == "success"
    description = describe(root)
    assert description["latest"] == "20261107T000000Z"
    [entry] = description["versions"]
    assert entry["published"] and entry["validated"] and entry["samples"] == 1797
