#!/usr/bin/env bash
# The package as a zip for executors on a cluster (spark-submit --py-files,
# or SPARK_WEBDATASET_PY_FILES for the DAG). Prints the zip's path.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$REPO/dist/spark_webdataset.zip}"
python3 - "$REPO/plugins" "$out" <<'PY'
import os, sys, zipfile
plugins, out = sys.argv[1], sys.argv[2]
os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
    for folder, dirs, files in sorted(os.walk(os.path.join(plugins, "spark_webdataset"))):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            info = zipfile.ZipInfo(os.path.relpath(path, plugins), date_time=(1980, 1, 1, 0, 0, 0))
            with open(path, "rb") as source:
                archive.writestr(info, source.read(), zipfile.ZIP_DEFLATED)
PY
echo "$out"
