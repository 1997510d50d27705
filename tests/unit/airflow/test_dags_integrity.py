"""Every DAG file imports cleanly, is wired sanely, looks nothing up at parse time; plugins import cleanly;
a bad dataset config is one import error and every other dataset's DAG still loads (its staying
scheduled, with the DAG processor: tests/e2e/test_dag_integrity.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from unittest import mock

import pytest

from tests.support import DAGS, REPO
from tests.support.dataset_dags import ERRORS_FILE, dagbag_of, write_config


def _refuse(*args, **kwargs):
    raise AssertionError("a Variable or Connection was looked up while the DAG file was parsed")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    # Injected fault: lookups raise, so a parse-time lookup becomes an import error.
    with (
        mock.patch("airflow.sdk.Variable.get", _refuse),
        mock.patch("airflow.sdk.Connection.get", _refuse),
        mock.patch("airflow.models.Variable.get", _refuse),
        mock.patch("airflow.hooks.base.BaseHook.get_connection", _refuse),
    ):
        return DagBag(dag_folder=str(DAGS))


def test_every_dag_file_imports(dagbag) -> None:
    assert dagbag.import_errors == {}
    # one DAG per dataset config, and the example consumer
    configs = sorted(p.stem for p in (REPO / "datasets").glob("*.yaml"))
    assert configs == ["digits"]
    assert sorted(dagbag.dag_ids) == sorted([*(f"webdataset__{name}" for name in configs), "consume_webdataset"])


def test_parsing_the_dag_folder_imports_no_spark_and_no_remote_storage() -> None:
    """Parse time reads the YAMLs and builds DAG objects only: Spark and the GCS backend load in the tasks."""
    probe = (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(DAGS)!r})\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j', 'wids')\n"
        "               or m.startswith(('google.cloud', 'spark_webdataset.storage.gcs', 'spark_webdataset.spark')))\n"
        "print(json.dumps({'errors': list(bag.import_errors), 'dags': sorted(bag.dag_ids), 'heavy': heavy}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["errors"] == [] and "webdataset__digits" in report["dags"], report
    assert report["heavy"] == [], report


@pytest.mark.parametrize("dag_id", ["webdataset__digits", "consume_webdataset"])
def test_dags_have_tags_retries_and_docs(dagbag, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    assert dag.tags and dag.doc_md and dag_id in dag.doc_md
    assert all(task.retries >= 1 for task in dag.tasks)  # failures no retry can fix fail at once instead
    dag.check_cycle()  # raises on a cycle


def test_dataset_dag_wiring(dagbag) -> None:
    dag = dagbag.dags["webdataset__digits"]
    order = [t.task_id for t in dag.topological_sort()]
    assert dag.get_task("write_shards").downstream_task_ids == {"validate"}
    assert dag.get_task("validate").downstream_task_ids == {"publish"}
    [outlet] = dag.get_task("publish").outlets
    assert outlet.name == "webdataset_digits"
    assert dag.catchup is False and dag.params["order"] == "hash" and dag.params["max_shard_bytes"] == "1MiB"
    assert order == ["plan", "write_shards", "validate", "publish"]
    assert dag.fileloc == str(DAGS / "webdataset_datasets.py")


def test_the_consumer_runs_on_every_configured_dataset(tmp_path, monkeypatch) -> None:
    for name in ("a", "b"):
        write_config(tmp_path, name, source="/raw", root=f"/out/{name}", key="id")
    monkeypatch.setenv("SPARK_WEBDATASET_DATASETS", str(tmp_path))
    bag = dagbag_of(DAGS / "consume_webdataset.py")
    assert bag.import_errors == {}
    condition = bag.dags["consume_webdataset"].timetable.asset_condition
    assert sorted(asset.name for asset in condition.objects) == ["webdataset_a", "webdataset_b"]
    tasks = {t.task_id for t in bag.dags["consume_webdataset"].tasks}
    assert tasks == {"read_each_published_version", "read_latest_version"}


def test_a_bad_config_is_one_import_error_and_the_other_datasets_load(tmp_path, monkeypatch) -> None:
    write_config(tmp_path, "good", source="/raw/good", root="/out/good", key="id")
    bad = write_config(tmp_path, "broken", source="/raw/broken", root="/out/broken", key="id", max_shard_bytes="lots")
    monkeypatch.setenv("SPARK_WEBDATASET_DATASETS", str(tmp_path))
    bag = dagbag_of(DAGS)
    assert sorted(bag.dag_ids) == ["consume_webdataset", "webdataset__good"]
    assert list(bag.import_errors) == [str(DAGS / ERRORS_FILE)]
    error = bag.import_errors[str(DAGS / ERRORS_FILE)]
    assert "1 dataset config cannot be used (every other dataset's DAG loads)" in error
    assert f"{bad}: field 'max_shard_bytes': max_shard_bytes='lots' is not a byte size" in error
    # fixed: no error left
    write_config(tmp_path, "broken", source="/raw/broken", root="/out/broken", key="id", max_shard_bytes="1GiB")
    fixed = dagbag_of(DAGS)
    assert fixed.import_errors == {} and "webdataset__broken" in fixed.dag_ids


def test_airflow_loads_its_plugins_without_an_error() -> None:
    """plugins/ holds the package: the plugin manager imports none of its modules as a plugin file, and
    the view comes once, from the package's entry point (a second copy would be an import error)."""
    probe = (
        "import json, sys\n"
        "from airflow import plugins_manager\n"
        "plugins, errors = plugins_manager._get_plugins()\n"
        "files = sorted(str(p.source.path) for p in plugins if hasattr(p.source, 'path'))\n"
        "points = sorted(f'{p.source.dist} {p.name}={p.__module__}' for p in plugins if hasattr(p.source, 'entrypoint'))\n"
        "shadowed = sorted(m for m in ('errors', 'layout', 'gcs', 'keys', 'pipeline') if m in sys.modules)\n"
        "print(json.dumps({'errors': errors, 'files': files, 'points': points, 'shadowed': shadowed}))\n"
    )
    env = {**os.environ, "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins")}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["errors"] == {} and report["shadowed"] == [], report  # no module of the package as a plugin
    assert report["files"] == [], report  # plugins/ is the package's home, not a plugin file's
    assert report["points"] == ["spark-webdataset webdataset_view=spark_webdataset.airflow.ui.plugin"], report
    assert "attempted relative import" not in done.stderr
