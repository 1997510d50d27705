"""One Airflow DAG per dataset config: the wiring of `pipeline`'s steps, nothing else.

`build_dags()` loads the datasets folder (`configs`) and builds
`webdataset__<name>` for every usable config: `plan` >> `write_shards`
(spark-submit of the packaged `spark_webdataset/jobs/entry/build_webdataset.py`)
>> `validate` >> `publish`
(outlet: the Asset `webdataset_<name>` of the dataset's root).

Every task writes only into its config's root: the Params form has no root,
a run conf naming another fails `plan` (who may trigger one DAG may change
no other dataset), and each task has the config's `execution_timeout`.

Why two DAG files use it (dags/webdataset_datasets.py registers the DAGs,
dags/dataset_config_errors.py raises the errors): Airflow 3.3 records
import errors per file, and an import error marks every DAG of that file
stale (`dag_processing.collection._update_import_errors`), so the
scheduler stops running them. The errors therefore go to a file that
holds no DAG, and one bad config never stops the other datasets.

Nothing here looks up a Variable or a Connection: that happens in the
tasks, when they run.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, Param, task
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from ..dataset.build_rules import CHANGES, ORDERS
from ..dataset.paths import VERSION_ID_RULE
from ..errors import EXIT_BAD_INPUT, DatasetConfigError, InvalidDatasetConfigs, PipelineError
from ..jobs.entry import BUILD_WEBDATASET, script
from .configs import BuildSettings, DatasetConfig, RetentionSettings, load_folder

RETRY_DELAY = datetime.timedelta(minutes=1)


class SparkJobOperator(SparkSubmitOperator):
    """spark-submit that fails at once, without retries, when the job reports bad input.

    The job exits 2 for input a retry cannot fix (a missing source, a bad
    key, an invalid option); the provider's hook turns every non-zero exit
    into the same AirflowException, so the exit code is read from the
    spark-submit process it ran (the hook's `_submit_sp`, and its last lines
    for the job's `error:` line: provider internals, pinned in
    constraints.txt and exercised by tests/test_dag_runs.py). Other
    failures (exit 1, a lost executor, a killed driver) keep their
    retries. In cluster deploy mode spark-submit does not return the
    driver's code: there every failure retries.
    """

    def execute(self, context: Any) -> Any:
        try:
            return super().execute(context)
        except AirflowFailException:
            raise
        except AirflowException as error:
            process = getattr(self._hook, "_submit_sp", None)
            if process is None or process.returncode != EXIT_BAD_INPUT:
                raise
            reasons = [line for line in getattr(self._hook, "_last_submit_log_lines", ()) if ": error:" in line]
            reason = reasons[-1] if reasons else "see the job's output above"
            message = f"the Spark job rejected its input (exit code {EXIT_BAD_INPUT}), so no retry can help: {reason}"
            self.log.error("%s", message)
            raise AirflowFailException(message) from error


@contextlib.contextmanager
def fail_without_retry() -> Iterator[None]:
    """A PipelineError (bad params, an unfit version) fails the task at once; other errors retry."""
    try:
        yield
    except PipelineError as error:
        raise AirflowFailException(str(error)) from error


def dataset_asset(config: DatasetConfig) -> Asset:
    """The Asset a dataset's DAG updates on each publish: downstream DAGs schedule on it."""
    return Asset(name=config.asset_name, uri=config.asset_uri, group="webdataset")


def run_params(config: DatasetConfig) -> dict[str, Param]:
    """The manual-run form: each field starts at the config's value and can be overridden per run.

    Not the root: the config folder alone says where a dataset lives (a run conf that still names
    `output_root` must name the config's root, or `plan` fails).
    """
    about = {name: info.description for name, info in DatasetConfig.model_fields.items()}  # the config's own words
    return {
        "source": Param(config.source, type=["null", "string"], description=about["source"]),
        "source_table": Param(config.source_table, type=["null", "string"], description="a catalog table instead of source (give one of the two)"),
        "source_format": Param(config.source_format, type="string", description=about["source_format"]),
        "key": Param(config.key, type="string", description=about["key"]),
        "fields": Param(config.field_args, type="array", items={"type": "string"}, description="EXT=COLUMN_OR_SQL, one per member; empty: every other column"),
        "max_shard_bytes": Param(config.max_shard_bytes, type="string", description="hard cap per shard, e.g. 3GiB"),
        "max_samples_per_shard": Param(config.max_samples_per_shard, type=["null", "integer"], minimum=1),
        # change and order: any text, offered as examples; `plan` checks them by the build rules, in our words
        # (an enum would make Airflow refuse a bad value at trigger, with its schema's traceback)
        "order": Param(config.order, type="string", examples=list(ORDERS), description=about["order"]),
        "parent": Param(config.build.parent, type=["null", "string"], description=BuildSettings.model_fields["parent"].description),
        "change": Param(config.build.change, type="string", examples=list(CHANGES), description=BuildSettings.model_fields["change"].description),
        "version": Param(None, type=["null", "string"], description=f"override the version id (default: from the run's date): {VERSION_ID_RULE}"),
        **(retention_params(config.retention) if config.retention else {}),
    }  # fmt: skip


def retention_params(retention: RetentionSettings) -> dict[str, Param]:
    """The gc task's knobs a manual run may change (min_age stays the config's: it protects other runs)."""
    about = {name: info.description for name, info in RetentionSettings.model_fields.items()}
    return {
        "keep_last": Param(retention.keep_last, type="integer", minimum=1, description=about["keep_last"]),
        "keep_days": Param(retention.keep_days, type=["null", "number"], minimum=0, description=about["keep_days"]),
    }


EXTRA_FIELDS = (
    "version",
    "uri",
    "samples",
    "shards",
    "bytes",
    "parent",
    "bytes_stored",
    "bytes_referenced",
    "change",
    "gc_would_free",
)


def event_extra(root: str, result: dict) -> dict:
    """The Asset event's extra: where the version is, what it holds and costs (no per-shard lists)."""
    extra = {"root": root, "index": result["index_uri"]}
    extra.update({name: result[name] for name in EXTRA_FIELDS if name in result})
    return extra


def dataset_doc(config: DatasetConfig, doc_md: str) -> str:
    """The DAG's docs: what this dataset is (from its config), then the DAG file's own docstring."""
    if config.source_table:
        source = f"table `{config.source_table}`"
    else:
        source = f"`{config.source}` ({config.source_format})"
    lines = [
        f"### {config.dag_id}",
        "",
        f"Config `{config.path}`: {source} -> `{config.root}`, key `{config.key}`, "
        f"shards of at most {config.max_shard_bytes}, schedule `{config.schedule}`; "
        f"publishes the Asset `{config.asset_name}`.",
        "",
        doc_md.strip(),
    ]
    return "\n".join(lines)


def _check_schedule(config: DatasetConfig, dag: DAG) -> None:
    """Airflow's own schedule rules, tied to the config's field (DagBag would blame the whole DAG file)."""
    try:
        dag.timetable.validate()
    except Exception as error:  # noqa: BLE001 - AirflowTimetableInvalid and croniter's errors
        rule = f"{config.schedule!r} is not a cron expression or preset: {error}"
        raise DatasetConfigError(config.path or config.name, [("schedule", rule)]) from None


def build_dag(config: DatasetConfig, doc_md: str = "") -> DAG:
    """The DAG of one dataset; raise DatasetConfigError if Airflow refuses what the config asks for."""
    asset = dataset_asset(config)
    spark, validation, timeouts, root = config.spark, config.validation, config.timeouts, config.root
    retention = config.retention.model_dump() if config.retention else None  # plain values for the tasks
    dag = DAG(
        dag_id=config.dag_id,
        description=f"{config.name}: Spark source -> WebDataset shards -> validate -> publish",
        doc_md=dataset_doc(config, doc_md),
        schedule=config.schedule,
        start_date=config.start_date,
        catchup=config.catchup,
        max_active_runs=1,
        render_template_as_native_obj=True,
        tags=list(dict.fromkeys(["webdataset", "spark", *config.tags])),
        default_args={
            "owner": config.owner,
            "retries": config.retries,
            "retry_delay": RETRY_DELAY,
            "retry_exponential_backoff": True,
        },
        params=run_params(config),
        auto_register=False,  # the DAG file registers what it keeps; dataset_config_errors.py keeps none
    )
    _check_schedule(config, dag)
    with dag:

        @task(execution_timeout=timeouts["plan"])
        def plan(params=None, dag_run=None) -> dict:
            from spark_webdataset.airflow.pipeline import plan_run

            conf = getattr(dag_run, "conf", None)  # as given: checked even where it does not override Params
            with fail_without_retry():
                planned = plan_run(params, dag_run.logical_date, dag_run.run_after, root, conf, retention)
            on = f" on {planned['parent']} ({planned['change']})" if planned["parent"] else ""
            print(f"version {planned['version']}{on} -> {planned['version_uri']} from {planned['source']}")
            return planned

        planned = plan()

        write_shards = SparkJobOperator(
            task_id="write_shards",
            conn_id=spark.conn_id,
            conf=dict(spark.conf) or None,
            application=script(BUILD_WEBDATASET),  # the installed package's, no checkout needed
            application_args="{{ ti.xcom_pull(task_ids='plan')['job_args'] }}",
            py_files=spark.py_files,
            name=config.dag_id,
            execution_timeout=timeouts["write_shards"],
        )

        @task(execution_timeout=timeouts["validate"])
        def validate(planned: dict) -> dict:
            from spark_webdataset.airflow.pipeline import validate_step

            with fail_without_retry():
                return validate_step(
                    root,  # the config's, whatever the XCom says
                    planned["version"],
                    planned["version_uri"],
                    validation.spark_master,
                    validation.required_fields,
                )

        @task(outlets=[asset], execution_timeout=timeouts["publish"])
        def publish(planned: dict, validated: dict, outlet_events=None) -> dict:
            from spark_webdataset.airflow.pipeline import publish_step

            with fail_without_retry():
                result = publish_step(root, planned["version"], planned.get("logical_date"), planned.get("retention"))
            outlet_events[asset].extra = event_extra(root, result)
            return result

        validated = validate(planned)
        planned >> write_shards >> validated
        published = publish(planned, validated)
        if retention is not None:

            @task(execution_timeout=timeouts["gc"])
            def gc(planned: dict, published: dict) -> dict:
                from spark_webdataset.airflow.pipeline import gc_step

                with fail_without_retry():
                    return gc_step(root, published["version"], planned["retention"])

            gc(planned, published)
    try:
        dag.validate()  # what DagBag checks: a failure here would be an import error of the whole DAG file
    except Exception as error:  # noqa: BLE001 - any refusal is this config's problem
        rule = f"Airflow refuses the DAG it gives: {error}"
        raise DatasetConfigError(config.path or config.name, [(None, rule)]) from None
    return dag


@dataclass
class BuiltDags:
    """The DAGs of every usable config by DAG id, their configs and Assets, and one error per unusable file."""

    folder: Path
    configs: list[DatasetConfig] = field(default_factory=list)
    dags: dict[str, DAG] = field(default_factory=dict)
    assets: dict[str, Asset] = field(default_factory=dict)
    errors: list[DatasetConfigError] = field(default_factory=list)

    def raise_errors(self) -> None:
        """Raise one error listing every unusable config file (file, field, rule), if there is any."""
        if self.errors:
            raise InvalidDatasetConfigs(self.errors)


def build_dags(folder: Path | str | None = None, doc_md: str = "") -> BuiltDags:
    """The DAG of every usable config in the folder (default: the datasets folder); errors for the rest."""
    loaded = load_folder(folder)
    built = BuiltDags(loaded.folder, errors=list(loaded.errors))
    for config in loaded.configs:
        try:
            dag = build_dag(config, doc_md)
        except DatasetConfigError as error:
            built.errors.append(error)
            continue
        built.configs.append(config)
        built.dags[dag.dag_id] = dag
        built.assets[config.name] = dataset_asset(config)
    return built
