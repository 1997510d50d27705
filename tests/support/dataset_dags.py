"""Dataset configs written by tests, and the DAGs Airflow builds from them (through the real DAG file).

Point SPARK_WEBDATASET_DATASETS at the folder for the whole test (monkeypatch.setenv): dag.test()
parses the DAG folder again to store the DAG, and must find the same configs.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import yaml

from tests.support import DAGS

DATASETS_DAG_FILE = DAGS / "webdataset_datasets.py"
ERRORS_FILE = "dataset_config_errors.py"  # the DAG folder's file that reports bad dataset configs
DAY = datetime.datetime(2026, 11, 20, tzinfo=datetime.timezone.utc)  # a logical date for the runs


def write_config(folder: Path, stem: str, /, **fields) -> Path:
    """<folder>/<stem>.yaml with these fields (YAML from Python values)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.yaml"
    path.write_text(yaml.safe_dump(fields, sort_keys=False))
    return path


def dagbag_of(dag_file: Path = DATASETS_DAG_FILE):
    """Airflow's DagBag of a DAG file (or folder), parsed with the current environment."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(dag_file))


def dataset_dag(name: str):
    """The DAG webdataset__<name> as Airflow parses it from the configs of SPARK_WEBDATASET_DATASETS."""
    bag = dagbag_of()
    assert bag.import_errors == {}, bag.import_errors
    return bag.dags[f"webdataset__{name}"]
