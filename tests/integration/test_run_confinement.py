"""Runs confined to their dataset (issue 19), with Spark: no dataset root may lie inside a version
directory (writer, jobs, publish, the pipeline steps, the config loader), and the root check on
gs:// costs a few exists calls. Manual DAG runs: tests/e2e/test_run_confinement.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spark_webdataset.airflow.configs import load_folder
from spark_webdataset.dataset.paths import ROOT_RULE, check_dataset_root
from spark_webdataset.errors import NestedDatasetRoot, from_spark
from tests.support.dataset_dags import DAY, write_config
from tests.support.helpers import snapshot_files

# -- a root inside a published version: refused everywhere ---------------------------------------------------


@pytest.fixture(scope="module")
def published_root(spark, digits_source, tmp_path_factory) -> Path:
    """ROOT with version 20261101 written by the data source, validated and published."""
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.dataset.validate import validate_version

    root = tmp_path_factory.mktemp("published") / "root"
    target = root / "versions" / "20261101"
    (
        spark.read.parquet(digits_source)
        .selectExpr("format_string('%05d', id) AS __key__", "label AS cls")
        .write.format("webdataset")
        .mode("overwrite")
        .save(str(target))
    )
    assert validate_version(str(target)).ok
    publish(str(root), "20261101")
    assert (target / "_SEALED").exists() and (root / "LATEST").read_text().strip() == "20261101"
    return root


def test_the_writer_refuses_a_root_inside_a_published_version(spark, published_root) -> None:
    sealed = published_root / "versions" / "20261101"
    before = snapshot_files(published_root)
    frame = spark.createDataFrame([("k1", "x")], "__key__ string, txt string")
    for target, enclosing in (
        (sealed / "versions" / "v1", "is itself a version directory (it holds _manifest.json)"),
        (sealed / "sub", "lies inside version '20261101' of dataset"),  # a plain directory below it
        (published_root / "elsewhere" / "versions" / "v1", f"lies inside the root of dataset {published_root}"),
    ):
        with pytest.raises(Exception) as refused:
            frame.write.format("webdataset").mode("overwrite").save(str(target))
        error = from_spark(refused.value)
        assert isinstance(error, NestedDatasetRoot), refused.value
        assert enclosing in str(error), error
    assert snapshot_files(published_root) == before  # no LATEST, _published/ nor versions/ in the sealed directory


def test_the_jobs_refuse_a_root_inside_a_published_version_before_spark_starts(published_root, capsys) -> None:
    from spark_webdataset.jobs.build import main as build_main
    from spark_webdataset.jobs.reshard import main as reshard_main

    inside = published_root / "versions" / "20261101"
    before = snapshot_files(published_root)
    argv = ["--source", "/nowhere", "--output", str(inside), "--version", "v1", "--key", "id"]
    assert build_main(argv) == 2
    assert f"build_webdataset: error: dataset root {inside} is itself a version directory" in capsys.readouterr().err
    argv = ["--input", str(inside), "--output", str(inside / "deeper"), "--version", "v1"]
    assert reshard_main(argv) == 2
    assert f"lies inside version '20261101' of dataset {published_root}" in capsys.readouterr().err
    assert snapshot_files(published_root) == before


def test_publish_and_the_pipeline_steps_refuse_a_root_inside_a_published_version(published_root) -> None:
    from spark_webdataset.airflow.pipeline import plan_run, publish_step, validate_step
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.errors import PipelineError

    inside = str(published_root / "versions" / "20261101")
    before = snapshot_files(published_root)
    with pytest.raises(NestedDatasetRoot, match=re.escape(f"dataset root {inside} is itself a version directory")):
        publish(inside, "v1")
    with pytest.raises(NestedDatasetRoot, match=re.escape(f"lies inside the root of dataset {published_root}")):
        publish(str(published_root / "other"), "v1")
    params = {"source": "/raw", "source_format": "parquet", "key": "id", "max_shard_bytes": "1MiB", "order": "hash"}
    for step in (
        lambda: plan_run(params, DAY, DAY, inside),  # a config whose root is only known on storage
        lambda: validate_step(inside, "v1"),
        lambda: publish_step(inside, "v1"),
    ):
        with pytest.raises(PipelineError, match="is itself a version directory"):
            step()
    assert snapshot_files(published_root) == before


def test_the_config_loader_refuses_a_root_inside_another_configs_version(published_root, tmp_path) -> None:
    folder = tmp_path / "datasets"
    write_config(folder, "a_outer", source="/raw", root=str(published_root), key="id")
    inner = write_config(folder, "b_inner", source="/raw", root=str(published_root / "versions" / "20261101"), key="id")
    loaded = load_folder(folder, environ={})
    assert [config.name for config in loaded.configs] == ["a_outer"]
    [error] = loaded.errors
    assert str(error) == (
        f"{inner}: field 'root': dataset root {published_root}/versions/20261101 lies inside version '20261101' "
        f"of dataset {published_root}: {ROOT_RULE} ({str(published_root)!r} is the root of a_outer.yaml)"
    )


# -- the rule on gs://: a few exists calls ------------------------------------------------------------------


def test_the_root_check_on_gcs_costs_a_few_exists_calls(bucket, monkeypatch) -> None:
    from spark_webdataset.storage import storage_for
    from spark_webdataset.storage.gcs import GCSStorage

    storage = storage_for(bucket)
    storage.write_atomic(f"{bucket}/ds/LATEST", b"v1\n")
    storage.write_atomic(f"{bucket}/ds/versions/v1/_manifest.json", b"{}")
    calls: list[str] = []
    real_exists = GCSStorage.exists

    def counted(self, path):
        calls.append(path)
        return real_exists(self, path)

    monkeypatch.setattr(GCSStorage, "exists", counted)
    assert check_dataset_root(f"{bucket}/ok/root") == f"{bucket}/ok/root"
    assert len(calls) == 2 + 3 * 2  # the root's two marks, three for each directory above it
    for root, how in (
        (f"{bucket}/ds/versions/v1", "is itself a version directory (it holds _manifest.json)"),
        (f"{bucket}/ds/versions/v1/x", f"lies inside version 'v1' of dataset {bucket}/ds"),
        (f"{bucket}/ds/x", f"lies inside the root of dataset {bucket}/ds (it holds LATEST)"),
    ):
        with pytest.raises(NestedDatasetRoot, match=re.escape(f"dataset root {root} {how}")):
            check_dataset_root(root)
