"""Where an installed package looks for its dataset configs and data: beside the DAGs folder, not the
package. The installed wheel's DAG run: tests/e2e/test_installed_wheel.py.
"""

from __future__ import annotations

from pathlib import Path

from spark_webdataset.airflow.configs import datasets_folder, default_data_folder


def test_configs_and_data_default_to_folders_beside_the_dags_folder_not_the_package() -> None:
    """Installed, the package sits in site-packages: the defaults follow the deployment (/opt/airflow) instead."""
    airflow = {"AIRFLOW__CORE__DAGS_FOLDER": "/opt/airflow/dags"}
    assert datasets_folder(airflow) == Path("/opt/airflow/datasets")
    assert datasets_folder({**airflow, "SPARK_WEBDATASET_DATASETS": "conf/ds"}) == Path("/opt/airflow/conf/ds")
    assert datasets_folder({**airflow, "SPARK_WEBDATASET_DATASETS": "/etc/ds"}) == Path("/etc/ds")
    assert default_data_folder(airflow) == "/opt/airflow/data"
    assert default_data_folder({**airflow, "SPARK_WEBDATASET_DATA": "/srv/d"}) == "/srv/d"
