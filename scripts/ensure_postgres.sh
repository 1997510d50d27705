#!/usr/bin/env bash
# tests/test_airflow_postgres.py runs the compose stack's Airflow on Debian's PostgreSQL (a
# private cluster it starts itself). Install postgresql where we may (root with apt); elsewhere
# say how, and carry on: that test is skipped with the reason.
set -uo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "PostgreSQL missing: installing postgresql with apt-get" >&2
  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; then
    exit 0
  fi
  echo "apt-get could not install postgresql; the Postgres test will be skipped" >&2
  exit 0
fi
echo "PostgreSQL is missing (sudo apt-get install -y postgresql); the Postgres test will be skipped" >&2
exit 0
