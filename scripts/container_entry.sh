#!/usr/bin/env bash
# Entry point of every docker-compose service: build the same .venv that
# `make run`/`make test` build (Java 17 via apt, pinned Python packages),
# then run the service's own script. Nothing here that CI does not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
make env >/dev/null
exec "$@"
