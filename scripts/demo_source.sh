#!/usr/bin/env bash
# The demo dataset's source (scikit-learn digits as parquet), written when datasets/ still has
# the digits config and its source is missing. Called by airflow_standalone.sh and airflow_init.sh.
set -euo pipefail
if config="$(spark-webdataset datasets digits --json 2>/dev/null)"; then
  demo_source="$(python3 -c 'import json, sys; print(json.load(sys.stdin)["source"])' <<<"$config")"
  ls "$demo_source"/*.parquet >/dev/null 2>&1 || spark-webdataset demo-source "$demo_source"
fi
