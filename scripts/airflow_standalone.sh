#!/usr/bin/env bash
# Airflow's UI, scheduler and DAG processor in one process, on the embedded
# default (SQLite under airflow_home/): see and trigger the webdataset__<name>
# DAGs (one per datasets/*.yaml). UI on 0.0.0.0:8080, user admin, password in
# $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated.
set -euo pipefail
source "$(dirname "$0")/airflow_env.sh"
"$REPO/scripts/build_pyfiles.sh" >/dev/null  # for SPARK_WEBDATASET_PY_FILES on a cluster
# the demo dataset's source, if datasets/ still has the digits config and its source is missing
if config="$(spark-webdataset datasets digits --json 2>/dev/null)"; then
  demo_source="$(python -c 'import json, sys; print(json.load(sys.stdin)["source"])' <<<"$config")"
  ls "$demo_source"/*.parquet >/dev/null 2>&1 || spark-webdataset demo-source "$demo_source"
fi
airflow db migrate >/dev/null
exec airflow standalone
