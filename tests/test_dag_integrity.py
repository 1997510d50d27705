"""Every DAG file imports cleanly, is wired sanely, and looks nothing up at parse time."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

DAGS = Path(__file__).resolve().parents[1] / "dags"


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
    assert {"build_webdataset", "consume_webdataset"} <= set(dagbag.dag_ids)
    assert len(list(DAGS.glob("*.py"))) == len(dagbag.dag_ids)


@pytest.mark.parametrize("dag_id", ["build_webdataset", "consume_webdataset"])
def test_dags_have_tags_retries_and_docs(dagbag, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    assert dag.tags and dag.doc_md and dag_id in dag.doc_md
    # validation failures are defects in the data: retrying cannot fix them
    assert all(task.retries >= 1 for task in dag.tasks if task.task_id != "validate")
    dag.check_cycle()  # raises on a cycle


def test_build_dag_wiring(dagbag) -> None:
    dag = dagbag.dags["build_webdataset"]
    order = [t.task_id for t in dag.topological_sort()]
    assert dag.get_task("write_shards").downstream_task_ids == {"validate"}
    assert dag.get_task("validate").downstream_task_ids == {"publish"}
    assert dag.get_task("publish").outlets
    assert dag.catchup is False and dag.params["order"] == "hash"
    assert order == ["plan", "write_shards", "validate", "publish"]
