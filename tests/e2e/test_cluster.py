"""The DAG on a real Spark standalone cluster (master + worker on 127.0.0.1).

Executors run an interpreter whose environment lacks spark_webdataset, so
the package can only reach them the way a real cluster needs: --py-files.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess

import pytest

from tests.support import REPO
from tests.support.gcs_emulator import PortTaken, start_on_free_ports

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def executor_python() -> str:
    done = subprocess.run([str(REPO / "scripts" / "executor_env.sh")], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    python = done.stdout.strip().splitlines()[-1]
    probe = subprocess.run([python, "-c", "import spark_webdataset"], capture_output=True, text=True)
    assert probe.returncode != 0 and "No module named 'spark_webdataset'" in probe.stderr
    return python


BIND_FAILURES = ("Address already in use", "BindException", "Failed to bind", "Service 'sparkMaster' could not bind")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("spark-cluster")
    script = str(REPO / "scripts" / "spark_cluster.sh")
    env = {
        **os.environ,
        "SPARK_CLUSTER_DIR": str(state),
        "SPARK_WORKER_CORES": "2",
        "SPARK_WORKER_MEMORY": "3g",
        # fail on a taken port instead of moving to the next one (the URL we hand out names this one)
        "SPARK_MASTER_OPTS": f"{os.environ.get('SPARK_MASTER_OPTS', '')} -Dspark.port.maxRetries=0".strip(),
    }

    def start(port: int, webui: int) -> str:
        env.update(SPARK_MASTER_PORT=str(port), SPARK_MASTER_WEBUI_PORT=str(webui))
        started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=180)
        if started.returncode == 0:
            return started.stdout.strip()
        master_log = (state / "master.log").read_text() if (state / "master.log").exists() else ""
        subprocess.run([script, "stop"], env=env, timeout=60)
        if any(sign in master_log for sign in BIND_FAILURES):
            raise PortTaken(f"spark master on {port}/{webui}: {master_log[-500:]}")
        raise AssertionError(started.stderr + master_log[-2000:])

    try:
        yield start_on_free_ports(start, count=2)
    finally:
        subprocess.run([script, "stop"], env=env, timeout=60)


def test_dag_on_the_standalone_cluster(
    cluster, executor_python, digits_source, airflow_db, tmp_path, monkeypatch
) -> None:
    from tests.support.dataset_dags import dataset_dag, write_config

    py_files = subprocess.run(
        [str(REPO / "scripts" / "build_pyfiles.sh"), str(tmp_path / "spark_webdataset.zip")],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": cluster}))
    monkeypatch.setenv("PYSPARK_PYTHON", executor_python)
    root = tmp_path / "root"
    # the dataset's config ships the package to executors (spark.py_files), as a cluster deployment's would;
    # its own name: Airflow refuses one Asset name for two roots (the repo's digits is another)
    write_config(
        tmp_path / "datasets", "digits_cluster", source=digits_source, root=str(root), key="format_string('%05d', id)",
        fields={"png": "image", "cls": "label"}, max_shard_bytes="512KiB",
        spark={"py_files": "${CLUSTER_PY_FILES}", "conf": {"spark.executor.memory": "1g"}},
    )  # fmt: skip
    monkeypatch.setenv("CLUSTER_PY_FILES", py_files)
    monkeypatch.setenv("SPARK_WEBDATASET_DATASETS", str(tmp_path / "datasets"))
    dag = dataset_dag("digits_cluster")
    assert dag.get_task("write_shards").py_files == py_files
    run = dag.test(logical_date=datetime.datetime(2026, 11, 9, tzinfo=datetime.timezone.utc))
    assert run.state == "success"
    manifest = json.loads((root / "versions" / "20261109T000000Z" / "_manifest.json").read_text())
    assert manifest["run"]["spark_application_id"].startswith("app-")  # a standalone app, not local-
    assert manifest["samples"] == 1797
    assert (root / "LATEST").read_text().strip() == "20261109T000000Z"
