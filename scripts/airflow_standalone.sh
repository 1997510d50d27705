#!/usr/bin/env bash
# Airflow's UI, scheduler and DAG processor in one process, on the embedded
# default (SQLite under airflow_home/): see and trigger build_webdataset.
set -euo pipefail
source "$(dirname "$0")/airflow_env.sh"
"$REPO/scripts/build_pyfiles.sh" >/dev/null  # for SPARK_WEBDATASET_PY_FILES on a cluster
airflow db migrate >/dev/null
exec airflow standalone
