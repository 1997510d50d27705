"""The pipeline's logic, importable and testable without Airflow running.

The DAG files in dags/ only wire these functions to tasks. Defaults come
from the environment (read when the DAG file is parsed: no Variable or
Connection lookups), and every run's Params can override them.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import InputError, VersionError, WebDatasetError
from .format.sizes import format_size
from .layout import Dataset, check_version_id, iso_utc
from .publish import publish
from .validate import validate_version

REPO = Path(__file__).resolve().parents[2]
JOB_SCRIPT = str(REPO / "jobs" / "build_webdataset.py")
VERSION_FORMAT = "%Y%m%dT%H%M%SZ"


class PipelineError(WebDatasetError):
    """A step found the version unfit or the run's input bad; retrying will not help."""


@dataclass(frozen=True)
class PipelineDefaults:
    """What a run uses unless its Params say otherwise."""

    source: str
    source_format: str
    output_root: str
    key: str
    fields: list[str]
    max_shard_bytes: str
    max_samples_per_shard: int | None
    order: str
    schedule: str | None
    spark_master_for_validation: str | None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> "PipelineDefaults":
        data = environ.get("SPARK_WEBDATASET_DATA", str(REPO / "data"))
        fields = environ.get("SPARK_WEBDATASET_FIELDS", "png=image,cls=label,json=meta")
        max_samples = environ.get("SPARK_WEBDATASET_MAX_SAMPLES_PER_SHARD")
        schedule = environ.get("SPARK_WEBDATASET_SCHEDULE", "@daily")
        return cls(
            source=environ.get("SPARK_WEBDATASET_SOURCE", f"{data}/demo/digits"),
            source_format=environ.get("SPARK_WEBDATASET_SOURCE_FORMAT", "parquet"),
            output_root=environ.get("SPARK_WEBDATASET_ROOT", f"{data}/datasets/digits"),
            key=environ.get("SPARK_WEBDATASET_KEY", "format_string('%05d', id)"),
            fields=[f.strip() for f in fields.split(",") if f.strip()],
            max_shard_bytes=environ.get("SPARK_WEBDATASET_MAX_SHARD_BYTES", "1MiB"),
            max_samples_per_shard=int(max_samples) if max_samples else None,
            order=environ.get("SPARK_WEBDATASET_ORDER", "hash"),
            schedule=None if schedule.lower() in ("", "none") else schedule,
            spark_master_for_validation=environ.get("SPARK_WEBDATASET_VALIDATE_MASTER") or None,
        )

    def asset_uri(self) -> str:
        root = self.output_root
        return root if "://" in root else "file://" + os.path.abspath(root)


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


def plan_run(params: Mapping[str, Any], logical_date, run_after) -> dict:
    """Version, URIs and spark-submit arguments of one run."""
    version = version_id(logical_date, run_after, params.get("version") or None)
    root = params["output_root"]
    moment = logical_date or run_after
    source = render_source(params["source"], logical_date or run_after, version)
    args = [
        "--source", source,
        "--source-format", params["source_format"],
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
    return {
        "version": version,
        "root": root,
        "version_uri": Dataset(root).version(version).uri,
        "logical_date": iso_utc(moment) if moment else None,
        "source": source,
        "job_args": args,
    }


def validate_step(root: str, version: str, version_uri: str | None = None, spark_master: str | None = None) -> dict:
    """Validate; raise PipelineError (no retry helps) with the first errors if it fails.

    A published version is immutable and was validated before it was
    published: a re-run reports that validation instead of rewriting it.
    """
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
    report = validate_version(version_uri, spark_master=spark_master)
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
    try:
        result = publish(root, version, logical_date=logical_date)
    except VersionError as error:
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
