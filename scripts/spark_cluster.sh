#!/usr/bin/env bash
# A Spark standalone master and worker from the pyspark wheel (it has no
# start-master.sh): `scripts/spark_cluster.sh master|worker|start|stop`.
# CI, the tests and docker-compose.yaml all call this script.
#   SPARK_MASTER_PORT (7077), SPARK_MASTER_WEBUI_PORT (8081), SPARK_WORKER_CORES (2),
#   SPARK_WORKER_MEMORY (4g), SPARK_MASTER_HOST (127.0.0.1), SPARK_CLUSTER_DIR (state and logs)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$REPO/.venv/bin:$PATH"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
host="${SPARK_MASTER_HOST:-127.0.0.1}"
port="${SPARK_MASTER_PORT:-7077}"
webui="${SPARK_MASTER_WEBUI_PORT:-8081}"
cores="${SPARK_WORKER_CORES:-2}"
memory="${SPARK_WORKER_MEMORY:-4g}"
state="${SPARK_CLUSTER_DIR:-$REPO/data/spark-cluster}"
mkdir -p "$state"

master() {
  exec spark-class org.apache.spark.deploy.master.Master --host "$host" --port "$port" --webui-port "$webui"
}

worker() {
  exec spark-class org.apache.spark.deploy.worker.Worker --cores "$cores" --memory "$memory" \
    --work-dir "$state/work" --webui-port 0 "spark://$host:$port"
}

wait_for() {  # url-ish check: the master's web UI answers
  for _ in $(seq 1 120); do
    if curl -sf "http://$host:$webui/json/" | grep -q "\"$1\""; then return 0; fi
    sleep 0.5
  done
  echo "spark cluster: $1 did not come up; logs in $state" >&2
  return 1
}

case "${1:-}" in
  master) master ;;
  worker) worker ;;
  start)
    nohup "$0" master >"$state/master.log" 2>&1 & echo $! >"$state/master.pid"
    wait_for "ALIVE"
    nohup "$0" worker >"$state/worker.log" 2>&1 & echo $! >"$state/worker.pid"
    for _ in $(seq 1 120); do
      if curl -sf "http://$host:$webui/json/" | grep -q '"aliveworkers" *: *[1-9]'; then
        echo "spark://$host:$port"; exit 0
      fi
      sleep 0.5
    done
    echo "spark cluster: no worker registered; logs in $state" >&2; exit 1 ;;
  stop)
    for role in worker master; do
      if [ -f "$state/$role.pid" ]; then kill "$(cat "$state/$role.pid")" 2>/dev/null || true; rm -f "$state/$role.pid"; fi
    done ;;
  *) echo "usage: $0 master|worker|start|stop" >&2; exit 2 ;;
esac
