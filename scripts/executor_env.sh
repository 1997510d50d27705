#!/usr/bin/env bash
# An interpreter for Spark executors that has the third-party libraries but
# NOT spark_webdataset: the cluster tests use it to prove the package reaches
# executors through --py-files, never through the driver's site-packages.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$REPO/.venv-executor}"
if [ ! -x "$venv/bin/python" ] || [ "$REPO/constraints.txt" -nt "$venv/.installed" ]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q -c "$REPO/constraints.txt" pyarrow numpy "pandas<3" braceexpand google-cloud-storage tqdm
  touch "$venv/.installed"
fi
echo "$venv/bin/python"
