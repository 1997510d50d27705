"""
### consume_webdataset

An example consumer of every configured dataset: it runs when any
`webdataset__<name>` DAG publishes a version (an Asset event), and shows
the two ways to pick what to read. Copy the task that fits your use.

* `read_each_published_version` handles **every event**: it reads the
  version each event names, so it sees every version, including backfills
  of old dates (e.g. evaluate each version).
* `read_latest_version` reads each triggering dataset's **LATEST**: the
  newest version only, whichever event woke it (e.g. train on the freshest
  data); after a backfill of an old date it reads the newest one again.

Logic lives in `spark_webdataset.airflow.consumer`; this file is wiring only.
"""

from __future__ import annotations

import datetime

import pendulum
from airflow.sdk import DAG, AssetAny, task

from spark_webdataset.airflow.dags import build_dags

assets = list(build_dags().assets.values())
# A reading task that hangs (storage, a stuck worker) fails after this, and retries once.
READ_TIMEOUT = datetime.timedelta(hours=1)

with DAG(
    dag_id="consume_webdataset",
    doc_md=__doc__,
    schedule=AssetAny(*assets) if assets else None,
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    tags=["webdataset", "example"],
    default_args={"retries": 1, "execution_timeout": READ_TIMEOUT},
) as dag:

    @task
    def read_each_published_version(triggering_asset_events=None) -> list[dict]:
        from spark_webdataset.airflow.consumer import read_published

        events = [event for events in triggering_asset_events.values() for event in events]
        print(f"every version: {len(events)} publish event(s) since the last run", flush=True)
        return [read_published(event.extra) for event in sorted(events, key=lambda event: event.timestamp)]

    @task
    def read_latest_version(triggering_asset_events=None) -> list[dict]:
        from spark_webdataset.airflow.consumer import read_latest

        roots = sorted({event.extra["root"] for events in triggering_asset_events.values() for event in events})
        print(f"newest version only: LATEST of {', '.join(roots)}", flush=True)
        return [read_latest(root) for root in roots]

    read_each_published_version()
    read_latest_version()
