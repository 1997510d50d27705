#!/usr/bin/env bash
# Airflow's UI, scheduler and DAG processor in one process, on the embedded
# default (SQLite under $AIRFLOW_HOME): see and trigger the webdataset__<name>
# DAGs (one per datasets/*.yaml). UI on AIRFLOW__API__HOST:AIRFLOW__API__PORT
# (0.0.0.0:8080), user admin, password in
# $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated.
#
# * Tasks reach the execution API at AIRFLOW__CORE__EXECUTION_API_SERVER_URL; unless it is set,
#   it follows the API's host and port: http://localhost:8080/execution/ by default (0.0.0.0 and
#   :: are reached as localhost), plus the path of AIRFLOW__API__BASE_URL if it has one.
# * Nothing is written into the checkout: the package zip for SPARK_WEBDATASET_PY_FILES (a
#   cluster's executors) goes to $AIRFLOW_HOME/spark_webdataset.zip; the demo source, if missing,
#   to SPARK_WEBDATASET_DATA (AIRFLOW_HOME and the data default to airflow_home/ and data/).
# * Airflow runs in a session of its own. When this script stops (TERM, INT, or Airflow exiting),
#   every process of that session goes, task processes included (each task is a process group of
#   its own, which stopping Airflow's group would miss): TERM, then KILL what is left after
#   SPARK_WEBDATASET_STOP_SECONDS (default 20). Only a KILL of this script itself leaves them.
# * Arguments run instead of `airflow standalone`, in the same environment and session
#   (e.g. `scripts/airflow_standalone.sh airflow config list`).
set -euo pipefail
source "$(dirname "$0")/airflow_env.sh"

if [[ -z "${AIRFLOW__CORE__EXECUTION_API_SERVER_URL:-}" ]]; then
  api_host="${AIRFLOW__API__HOST:-0.0.0.0}"
  case "$api_host" in
    "" | 0.0.0.0 | :: | "[::]") api_host=localhost ;;
    \[*) ;;
    *:*) api_host="[$api_host]" ;;  # an IPv6 address
  esac
  base_path=""  # the api-server serves under the path of its base URL
  if [[ "${AIRFLOW__API__BASE_URL:-}" =~ ^[A-Za-z][A-Za-z0-9+.-]*://[^/]*(/.*)?$ ]]; then
    base_path="${BASH_REMATCH[1]}"
  elif [[ "${AIRFLOW__API__BASE_URL:-}" == /* ]]; then
    base_path="$AIRFLOW__API__BASE_URL"
  fi
  base_path="${base_path%/}"
  export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://$api_host:${AIRFLOW__API__PORT:-8080}$base_path/execution/"
fi

mkdir -p "$AIRFLOW_HOME"
"$REPO/scripts/build_pyfiles.sh" "$AIRFLOW_HOME/spark_webdataset.zip" >/dev/null  # for SPARK_WEBDATASET_PY_FILES on a cluster
"$REPO/scripts/airflow_init.sh" >/dev/null  # migrate, and the demo source if missing (as compose's init)

(($#)) || set -- airflow standalone
# In the background, so that this shell can trap signals; setsid: a session (and process group) of
# its own, led by the command (not a group leader here, so setsid execs it in place: $! is the leader).
setsid "$@" &
session=$!
grace="${SPARK_WEBDATASET_STOP_SECONDS:-20}"

session_members() {  # the live processes of the command's session (not this shell, nor its ps)
  ps -e -o pid= -o sid= -o stat= | awk -v sid="$session" '$2 == sid && $3 !~ /^Z/ { print $1 }'
}

stop() {
  trap - TERM INT EXIT
  local left deadline=$((SECONDS + grace))
  left="$(session_members)"
  # shellcheck disable=SC2086  # one pid a word
  [[ -z "$left" ]] || kill -s TERM $left 2>/dev/null || true
  while left="$(session_members)" && [[ -n "$left" ]] && ((SECONDS < deadline)); do
    sleep 0.5
  done
  deadline=$((SECONDS + 10))
  while left="$(session_members)" && [[ -n "$left" ]]; do
    if ((SECONDS >= deadline)); then
      echo "airflow_standalone.sh: still running after KILL: $left" >&2
      break
    fi
    # shellcheck disable=SC2086
    kill -s KILL $left 2>/dev/null || true
    sleep 0.2
  done
  wait "$session" 2>/dev/null || true  # reap the leader
}

trap 'stop; exit 143' TERM
trap 'stop; exit 130' INT
trap 'status=$?; stop; exit $status' EXIT
status=0
wait "$session" || status=$?
exit "$status"
