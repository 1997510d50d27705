"""
### consume_webdataset

An example consumer: runs whenever `build_webdataset` publishes a new
version (an Asset event) and reads the version named by the event through
its wids shard index. Copy it as the start of a training or evaluation DAG.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Asset, task

from spark_webdataset.pipeline import PipelineDefaults

dataset = Asset(name="webdataset_digits", uri=PipelineDefaults.from_environment().asset_uri(), group="webdataset")

with DAG(
    dag_id="consume_webdataset",
    doc_md=__doc__,
    schedule=[dataset],
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    tags=["webdataset", "example"],
    default_args={"retries": 1},
) as dag:

    @task
    def read_new_version(triggering_asset_events=None) -> dict:
        from spark_webdataset.consumer import read_published

        events = [event for events in triggering_asset_events.values() for event in events]
        return read_published(events[-1].extra)

    read_new_version()
