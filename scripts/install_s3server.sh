#!/usr/bin/env bash
# The S3 API server the tests start (moto in server mode), in its own venv beside the project's:
# botocore pins python-dateutil<3, the project 4.0.0 (tests/support/s3_server.py, docs/s3.md).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
test -x "$VENV/s3server/bin/python" || "$PYTHON" -m venv "$VENV/s3server"
"$VENV/s3server/bin/python" -m pip install -q -c constraints-s3server.txt 'moto[server]' crc32c
