"""
### build_webdataset

Shards a Spark source into a WebDataset version, validates every tar and
publishes the version: `plan` >> `write_shards` (spark-submit of
`jobs/build_webdataset.py`) >> `validate` >> `publish`.

* **Version id**: the run's logical date (`20261201T000000Z`), or
  `run_after` for a manual run without one, or the `version` param.
  Retries and backfills of a date land on the same version.
* **Publish** makes the version visible atomically and moves `LATEST`
  forward only; it updates the Asset, whose event carries version, URI,
  samples, shards and bytes.
* **Spark**: connection `spark_default` (`AIRFLOW_CONN_SPARK_DEFAULT`);
  `spark-submit` must be on PATH. Defaults come from `SPARK_WEBDATASET_*`
  environment variables (see README); the Params form overrides them.

Logic lives in `spark_webdataset.pipeline`; this file is wiring only.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, Param, task

from spark_webdataset.pipeline import JOB_SCRIPT, PipelineDefaults

defaults = PipelineDefaults.from_environment()
dataset = Asset(name="webdataset_digits", uri=defaults.asset_uri(), group="webdataset")

with DAG(
    dag_id="build_webdataset",
    description="Spark source -> WebDataset shards -> validate -> publish",
    doc_md=__doc__,
    schedule=defaults.schedule,
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    tags=["webdataset", "spark"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1), "retry_exponential_backoff": True},
    params={
        "source": Param(defaults.source, type="string", description="Spark source URI; {ds}, {ds_nodash}, {version} are filled in"),
        "source_format": Param(defaults.source_format, type="string", description="any Spark format"),
        "output_root": Param(defaults.output_root, type="string", description="dataset root (local path or gs://)"),
        "key": Param(defaults.key, type="string", description="column or SQL for each sample's key"),
        "fields": Param(defaults.fields, type="array", items={"type": "string"}, description="EXT=COLUMN_OR_SQL, one per member"),
        "max_shard_bytes": Param(defaults.max_shard_bytes, type="string", description="hard cap per shard, e.g. 3GiB"),
        "max_samples_per_shard": Param(defaults.max_samples_per_shard, type=["null", "integer"], minimum=1),
        "order": Param(defaults.order, enum=["hash", "key", "source"]),
        "version": Param(None, type=["null", "string"], description="override the version id (default: from the run's date)"),
    },
) as dag:

    @task
    def plan(params=None, dag_run=None) -> dict:
        from spark_webdataset.pipeline import plan_run

        planned = plan_run(params, dag_run.logical_date, dag_run.run_after)
        print(f"version {planned['version']} -> {planned['version_uri']} from {planned['source']}")
        return planned

    planned = plan()

    write_shards = SparkSubmitOperator(
        task_id="write_shards",
        conn_id="spark_default",
        application=JOB_SCRIPT,
        application_args="{{ ti.xcom_pull(task_ids='plan')['job_args'] }}",
        py_files=os.environ.get("SPARK_WEBDATASET_PY_FILES") or None,
        name="build_webdataset",
        execution_timeout=timedelta(hours=6),
    )

    @task(retries=0)
    def validate(planned: dict) -> dict:
        from spark_webdataset.pipeline import validate_step

        return validate_step(
            planned["root"], planned["version"], planned["version_uri"], defaults.spark_master_for_validation
        )

    @task(outlets=[dataset])
    def publish(planned: dict, validated: dict, outlet_events=None) -> dict:
        from spark_webdataset.pipeline import publish_step

        result = publish_step(planned["root"], planned["version"], planned.get("logical_date"))
        outlet_events[dataset].extra = {
            "version": result["version"],
            "uri": result["uri"],
            "index": result["index_uri"],
            "samples": result["samples"],
            "shards": result["shards"],
            "bytes": result["bytes"],
        }
        return result

    validated = validate(planned)
    planned >> write_shards >> validated
    publish(planned, validated)
