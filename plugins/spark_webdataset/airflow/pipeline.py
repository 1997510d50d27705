"""The pipeline's logic, importable and testable without Airflow running.

The DAG factory (`airflow_dags`) only wires these functions to tasks. A
run's Params start from its dataset's config (`dataset_config`) and may
override any of it but the root: the config folder alone says where a
dataset lives, so whoever may trigger one dataset's DAG can change no
other dataset and write nowhere else.
"""

from __future__ import annotations

import datetime
from typing import Any, Mapping, Sequence

from ..errors import InputError, NestedDatasetRoot, PipelineError, VersionError
from ..format.sizes import format_size
from ..dataset.layout import Dataset, check_dataset_root, check_version_id, iso_utc, parse_logical_date, record_order
from ..dataset.publish import publish
from ..dataset.validate import validate_version
from ..jobs.validate_spark import spark_check

VERSION_FORMAT = "%Y%m%dT%H%M%SZ"
ROOT_PARAM = "output_root"  # no longer a Param; a run conf that still names it must name the config's root


def version_id(logical_date: datetime.datetime | None, run_after: datetime.datetime | None, override: str | None = None) -> str:
    """The run's version: from its logical date, or `run_after` for a manual run without one.

    Retries and re-runs of the same date land on the same version.
    """
    if override:
        try:
            return check_version_id(override)
        except InputError as error:
            raise PipelineError(f"param 'version': {error}") from None
    moment = logical_date or run_after
    if moment is None:
        raise PipelineError("the run has neither a logical date nor run_after; pass the 'version' param")
    return moment.astimezone(datetime.timezone.utc).strftime(VERSION_FORMAT)


def render_source(source: str, moment: datetime.datetime | None, version: str) -> str:
    """Fill {ds}, {ds_nodash} and {version} in a source path, e.g. gs://raw/{ds}/*.parquet."""
    day = (moment or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
    return source.format(ds=day.strftime("%Y-%m-%d"), ds_nodash=day.strftime("%Y%m%d"), version=version)


def confined_root(root: str, *given: Mapping[str, Any] | None) -> str:
    """The dataset's root (its config's), checked; a run's Params or conf may not name another.

    An `output_root` in the Params or conf must be the config's root (a trailing '/' or file://
    aside); and the root may not lie inside another dataset or a version (`check_dataset_root`).
    """
    for values in given:
        if values and values.get(ROOT_PARAM) is not None and not _same_place(values[ROOT_PARAM], root):
            raise PipelineError(
                f"param {ROOT_PARAM!r} is {values[ROOT_PARAM]!r}, but a run writes only into its dataset's "
                f"root {root!r}: the dataset's config file alone says where it lives; leave {ROOT_PARAM!r} out"
            )
    try:
        check_dataset_root(root)
    except NestedDatasetRoot as error:
        raise PipelineError(f"the config's root: {error}") from None
    return root


def _same_place(given: Any, root: str) -> bool:
    return isinstance(given, str) and Dataset(given).root == Dataset(root).root


def parent_of(root: str, version: str, moment: datetime.datetime | None, wanted: str | None) -> str | None:
    """The parent a run builds on. LATEST means the newest version published for a date before the
    run's own (by the publish records' logical dates), so a backfilled date builds on its own past,
    never on a later day's version; None when there is none (the run is a full build)."""
    if wanted is None or wanted != "LATEST":
        return wanted
    dataset = Dataset(root)
    before = []
    for published in dataset.published_ids():
        record = dataset.read_record(published) or {}
        date = record.get("logical_date")
        if published != version and date is not None and moment is not None and parse_logical_date(date) < moment:
            before.append((record_order(published, record), published))
    if moment is None:  # no date to order by: the dataset's LATEST
        return dataset.read_latest()
    return max(before)[1] if before else None


def plan_run(
    params: Mapping[str, Any], logical_date, run_after, root: str, conf: Mapping[str, Any] | None = None
) -> dict:
    """Version, URIs and spark-submit arguments of one run into `root`, its dataset config's root.

    `conf` is the run's conf as given (Airflow merges it into the Params unless told not to):
    neither may move the run to another root.
    """
    root = confined_root(root, params, conf)
    version = version_id(logical_date, run_after, params.get("version") or None)
    moment = logical_date or run_after
    table = params.get("source_table") or None
    if bool(params.get("source")) == bool(table):
        raise PipelineError("give exactly one of the params 'source' (a URI) and 'source_table' (a table)")
    source = table or render_source(params["source"], moment, version)
    args = [
        *(["--source-table", table] if table else ["--source", source, "--source-format", params["source_format"]]),
        "--output", root,
        "--version", version,
        "--key", params["key"],
        "--max-shard-bytes", str(params["max_shard_bytes"]),
        "--order", params["order"],
        "--skip-if-published",
    ]  # fmt: skip
    for field in params.get("fields") or []:
        args += ["--field", field]
    if params.get("max_samples_per_shard"):
        args += ["--max-samples-per-shard", str(params["max_samples_per_shard"])]
    parent = parent_of(root, version, moment, params.get("parent") or None)
    if parent is not None:
        args += ["--parent", parent]
    return {
        "version": version,
        "root": root,
        "version_uri": Dataset(root).version(version).uri,
        "logical_date": iso_utc(moment) if moment else None,
        "source": source,
        "job_args": args,
    }


def validate_step(
    root: str,
    version: str,
    version_uri: str | None = None,
    spark_master: str | None = None,
    required_fields: Sequence[str] = (),
) -> dict:
    """Validate; raise PipelineError (no retry helps) with the first errors if it fails.

    A published version is immutable and was validated before it was
    published: a re-run reports that validation instead of rewriting it.
    """
    confined_root(root)
    target = Dataset(root).version(version)
    version_uri = target.uri
    if target.is_published():
        previous = target.read_validation() or {}
        print(f"version {version} is published already; its validation: ok={previous.get('ok')}", flush=True)
        return {
            "version_uri": version_uri,
            "samples": previous.get("samples"),
            "shards": previous.get("shard_count"),
            "bytes": previous.get("bytes"),
            "seconds": 0.0,
        }
    check = spark_check(spark_master) if spark_master else None
    report = validate_version(version_uri, require=required_fields, check=check)
    print(report.summary(), flush=True)
    if not report.ok:
        raise PipelineError(report.summary())
    return {
        "version_uri": version_uri,
        "samples": report.samples,
        "shards": len(report.shards),
        "bytes": report.bytes,
        "seconds": round(report.seconds, 3),
    }


def publish_step(root: str, version: str, logical_date: str | None = None) -> dict:
    """Publish the validated version; a refusal is a PipelineError (no retry helps)."""
    try:
        result = publish(root, version, logical_date=logical_date)
    except (VersionError, InputError) as error:  # unfit version, a root inside another dataset or a version
        raise PipelineError(str(error)) from None
    state = "already published (no-op)" if result.already_published else "published"
    print(
        f"{state}: version {result.version}: {result.shards} shards, {result.samples} samples, "
        f"{format_size(result.bytes)}; logical date {result.logical_date}; LATEST={result.latest}\n"
        f"  index: {result.index_uri}\n"
        f"  read it: wids.ShardListDataset({result.index_uri!r})",
        flush=True,
    )
    return result.as_dict()
