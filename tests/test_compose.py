"""docker-compose.yaml cannot run here (no Docker engine): check that it agrees with the scripts CI runs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text())


def test_every_service_runs_an_existing_script_through_the_shared_entry() -> None:
    services = compose()["services"]
    assert set(services) == {"gcs", "spark-master", "spark-worker", "airflow"}
    for name, service in services.items():
        assert service["entrypoint"] == ["scripts/container_entry.sh"], name
        script = REPO / service["command"][0]
        assert script.is_file() and os.access(script, os.X_OK), f"{name}: {script} missing or not executable"
        for dependency in service.get("depends_on", []):
            assert dependency in services, f"{name} depends on unknown {dependency}"
    entry = (REPO / "scripts" / "container_entry.sh").read_text()
    assert "make env" in entry  # the same environment make run / make test build


def test_ports_and_variables_agree_with_the_scripts() -> None:
    services = compose()["services"]
    cluster = (REPO / "scripts" / "spark_cluster.sh").read_text()
    for variable in ("SPARK_MASTER_HOST", "SPARK_MASTER_PORT", "SPARK_MASTER_WEBUI_PORT", "SPARK_WORKER_CORES", "SPARK_WORKER_MEMORY"):
        assert variable in cluster
    master = services["spark-master"]
    assert master["command"] == ["scripts/spark_cluster.sh", "master"]
    assert f"{master['environment']['SPARK_MASTER_PORT']}:7077" in master["ports"]
    assert f"{master['environment']['SPARK_MASTER_WEBUI_PORT']}:8081" in master["ports"]
    worker = services["spark-worker"]
    assert worker["command"] == ["scripts/spark_cluster.sh", "worker"]
    assert worker["environment"]["SPARK_MASTER_HOST"] == "spark-master"
    airflow = services["airflow"]
    assert "spark://spark-master:7077" in airflow["environment"]["AIRFLOW_CONN_SPARK_DEFAULT"]
    assert "8080:8080" in airflow["ports"]
    gcs = services["gcs"]
    port = gcs["command"][1]
    assert f"{port}:{port}" in gcs["ports"] and airflow["environment"]["STORAGE_EMULATOR_HOST"] == f"http://gcs:{port}"
    emulator = (REPO / "tests" / "gcs_emulator.py").read_text()
    for variable in gcs["environment"]:
        assert variable in emulator
    standalone = (REPO / "scripts" / "airflow_standalone.sh").read_text()
    assert "build_pyfiles.sh" in standalone
    assert re.search(r"dist/spark_webdataset\.zip", (REPO / "scripts" / "build_pyfiles.sh").read_text())
    assert airflow["environment"]["SPARK_WEBDATASET_PY_FILES"] == "/app/dist/spark_webdataset.zip"
    # the demo dataset's config is what hands that zip to spark-submit
    digits = yaml.safe_load((REPO / "datasets" / "digits.yaml").read_text())
    assert digits["spark"]["py_files"] == "${SPARK_WEBDATASET_PY_FILES:-}"
