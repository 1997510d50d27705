#!/usr/bin/env bash
# Airflow's UI, scheduler and DAG processor in one process, on the embedded
# default (SQLite under airflow_home/): see and trigger the webdataset__<name>
# DAGs (one per datasets/*.yaml). UI on 0.0.0.0:8080, user admin, password in
# $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated.
set -euo pipefail
source "$(dirname "$0")/airflow_env.sh"
"$REPO/scripts/build_pyfiles.sh" >/dev/null  # for SPARK_WEBDATASET_PY_FILES on a cluster
"$REPO/scripts/airflow_init.sh" >/dev/null  # migrate, and the demo source if missing (as compose's init)
exec airflow standalone
