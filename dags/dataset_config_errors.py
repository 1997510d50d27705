"""
Shows every dataset config that cannot be used as this file's Airflow
import error, naming each file, field and rule; it defines no DAG.

Airflow 3.3 keeps import errors per DAG file and marks every DAG of a file
with an import error stale (not scheduled). Raising in
dags/webdataset_datasets.py would therefore stop every dataset for one bad
config; raising here stops none, and the error clears once the configs
are fixed.
"""

from __future__ import annotations

from spark_webdataset.airflow.dags import build_dags

build_dags().raise_errors()
