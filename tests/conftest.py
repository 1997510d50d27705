"""One SparkSession and one Airflow home per test process: local[2,2] (2 attempts a task: one retry shows).

`make test` runs two pytest-xdist workers (loadscope: a module stays on one worker), each with
its own session, Airflow home, faults file and emulator; nothing here is shared between them but
the migrated-database cache, which is replaced atomically.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support import REPO, SUPPORT

BIN = Path(sys.executable).parent
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Spark JVMs of the tests (this session's and every spark-submit) run short jobs on 2 cores: C1 only, serial GC
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
os.environ["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"  # spark-submit, airflow
# Airflow reads its configuration when first imported: give the tests their
# own home and SQLite database, never the developer's airflow_home/.
AIRFLOW_TEST_HOME = tempfile.mkdtemp(prefix="airflow-test-")
os.environ["AIRFLOW_HOME"] = AIRFLOW_TEST_HOME
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{AIRFLOW_TEST_HOME}/airflow.db"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = '{"conn_type": "spark", "host": "local[2]"}'
os.environ["SPARK_WEBDATASET_DATASETS"] = str(REPO / "datasets")  # the repo's configs, whatever the shell says
# Test faults (spark_webdataset.fault_points.installed) go through this file: named before the
# SparkSession starts, so the JVM, its Python workers and every spark-submit child read it.
os.environ["SPARK_WEBDATASET_FAULTS_FILE"] = os.path.join(tempfile.mkdtemp(prefix="faults-"), "faults.json")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that needs Spark or an Airflow database is `slow` (`-m "not slow"`: the fast loop)."""
    for item in items:
        if {"spark", "airflow_db"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module", autouse=True)
def _tracemalloc_off_after_each_module():
    """tests/support/python_memory.PythonPeak leaves tracemalloc on within a module; off after it."""
    from tests.support.python_memory import stop_tracing

    yield
    stop_tracing()


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """A migrated SQLite metadata database for dag.test() runs, migrated once per Airflow version."""
    import shutil

    from airflow import __version__ as airflow_version

    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cached = cache_home / "spark-webdataset" / f"airflow-{airflow_version}-sqlite.db"
    database = Path(AIRFLOW_TEST_HOME) / "airflow.db"
    if cached.exists():
        shutil.copyfile(cached, database)
        return AIRFLOW_TEST_HOME
    subprocess.run([str(BIN / "airflow"), "db", "migrate"], check=True, capture_output=True, timeout=300)
    cached.parent.mkdir(parents=True, exist_ok=True)
    temp = cached.with_suffix(f".{os.getpid()}.tmp")
    shutil.copyfile(database, temp)
    os.replace(temp, cached)  # a fresh, migrated, empty database: safe to share between sessions
    return AIRFLOW_TEST_HOME


@pytest.fixture(scope="session")
def spark(gcs_emulator):
    """Started after the emulator: Spark's Python workers inherit STORAGE_EMULATOR_HOST from the JVM."""
    from pyspark.sql import SparkSession

    import spark_webdataset

    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("spark-webdataset-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        # workers are reused (Spark's default; a fresh worker a task cost 3/4 of the reshard tests'
        # time) and save their coverage after each task (tests/support/coverage_daemon.py)
        .config("spark.python.worker.reuse", "true")
        .config("spark.python.daemon.module", "coverage_daemon")
        .config("spark.executorEnv.PYTHONPATH", str(SUPPORT))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_webdataset.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def digits_source(tmp_path_factory) -> str:
    """The real demo source (scikit-learn digits) as parquet, made once."""
    from spark_webdataset.jobs.demo import write_digits_source

    directory = tmp_path_factory.mktemp("digits")
    write_digits_source(str(directory), files=8)
    return str(directory)


@pytest.fixture(scope="session")
def gcs_emulator():
    """A real GCS API (fake-gcs-server) on 127.0.0.1 for the whole session; clients find it by env."""
    from tests.support.gcs_emulator import Emulator

    emulator = Emulator()
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
    yield emulator
    emulator.stop()
    if previous is None:
        os.environ.pop("STORAGE_EMULATOR_HOST", None)


@pytest.fixture
def bucket(gcs_emulator, request) -> str:
    """A fresh bucket per test: gs://<name>."""
    import re

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-") + f"-{os.getpid()}"
    gcs_emulator.create_bucket(name)
    return f"gs://{name}"


# -- s3:// (a real S3 API: moto in server mode) ------------------------------------------------------
# The endpoint and dummy credentials are set now, before any Spark JVM starts, so the session's
# Python workers and every spark-submit child see them (tests/support/s3_server.py).
from tests.support import s3_server as _s3_server  # noqa: E402

_s3_server.reserve_environment()


@pytest.fixture(scope="session")
def s3_server():
    """moto_server on the endpoint reserved above, for the whole session."""
    server = _s3_server.S3Server(os.environ["AWS_ENDPOINT_URL"])
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server, request) -> str:
    """A fresh bucket per test: s3://<name>."""
    import re

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:50].strip("-") + f"-{os.getpid()}"
    return s3_server.create_bucket(name)
