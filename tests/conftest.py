"""One SparkSession for the whole test session (local[2,3]: 2 cores, 3 attempts per task)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    import spark_webdataset

    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("spark-webdataset-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_webdataset.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def digits_source(tmp_path_factory) -> str:
    """The real demo source (scikit-learn digits) as parquet, made once."""
    from spark_webdataset.demo import write_digits_source

    directory = tmp_path_factory.mktemp("digits")
    write_digits_source(str(directory), files=8)
    return str(directory)
