#!/usr/bin/env bash
# The compose stack's one-off init (service airflow-init; tests/test_airflow_postgres.py runs it
# natively): migrate Airflow's metadata database, then write the demo's source if it is missing.
set -euo pipefail
airflow db migrate
"$(dirname "$0")/demo_source.sh"
