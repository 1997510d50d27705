#!/usr/bin/env bash
# The checkout's package as a zip for executors on a cluster (spark-submit --py-files,
# or SPARK_WEBDATASET_PY_FILES for the DAG). Prints the zip's path. The rule lives in the
# package (spark_webdataset.jobs.entry.write_pyfiles): an installed package writes the same zip
# with `python -m spark_webdataset.jobs.entry --pyfiles OUT.zip`.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$REPO/dist/spark_webdataset.zip}"
PYTHONPATH="$REPO/plugins${PYTHONPATH:+:$PYTHONPATH}" python3 -m spark_webdataset.jobs.entry --pyfiles "$out"
