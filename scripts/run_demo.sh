#!/usr/bin/env bash
# `make run`: the main job end to end on the embedded default. Makes the demo
# source, runs the webdataset__digits DAG (from datasets/digits.yaml) with
# `airflow dags test` for today's date (so a second run is the same version and
# a no-op publish), and shows what was published.
set -euo pipefail
source "$(dirname "$0")/airflow_env.sh"
cd "$REPO"
mkdir -p "$AIRFLOW_HOME"
log="$AIRFLOW_HOME/last_run.log"
day="${DEMO_DATE:-$(date -u +%Y-%m-%d)}"
dag=webdataset__digits
config="$(spark-webdataset datasets digits --json 2>/dev/null)" || { spark-webdataset datasets digits >/dev/null; exit 1; }
source_dir="$(python -c 'import json, sys; print(json.load(sys.stdin)["source"])' <<<"$config")"
root="$(python -c 'import json, sys; print(json.load(sys.stdin)["root"])' <<<"$config")"

spark-webdataset demo-source "$source_dir"
airflow db migrate >"$AIRFLOW_HOME/db_migrate.log" 2>&1 || { tail -20 "$AIRFLOW_HOME/db_migrate.log"; exit 1; }
echo "running DAG $dag for $day (plan >> write_shards >> validate >> publish); log: $log"
if ! airflow dags test "$dag" "$day" >"$log" 2>&1; then
  grep -E "ERROR|error:|Traceback|refused" "$log" | tail -20
  echo "the DAG run failed; full log: $log" >&2
  exit 1
fi
grep -q "DagRun Finished.*state=success" "$log" || { echo "the DAG run did not succeed; see $log" >&2; exit 1; }
grep -E "build_webdataset: wrote|published already|^validate |^(already )?published|^  (index|read it):" "$log" | sed -E 's/^[0-9T:.Z-]+ \[info +\] //; s/ \[airflow[^]]*\].*$//'
echo
spark-webdataset inspect "$root"
latest="$(cat "$root/LATEST")"
echo
echo "Load it with webdataset:"
echo "  $REPO/.venv/bin/python -c \"import json, webdataset as wds; d='$root/versions/$latest'; urls=[d + '/' + s['url'] for s in json.load(open(d + '/shardindex.json'))['shardlist']]; print(sum(1 for _ in wds.WebDataset(urls, shardshuffle=False)), 'samples')\""
