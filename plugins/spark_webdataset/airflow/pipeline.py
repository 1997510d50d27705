"""The pipeline's logic, importable and testable without Airflow running.

The DAG factory (`airflow/dags.py`) only wires these functions to tasks. A
run's Params start from its dataset's config (`configs`) and may
override any of it but the root: the config folder alone says where a
dataset lives, so whoever may trigger one dataset's DAG can change no
other dataset and write nowhere else.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..dataset.build_rules import DELETE, LATEST, BuildBase, Spelling, check_order, parse_max_shard_bytes
from ..dataset.layout import Dataset
from ..dataset.ordering import iso_utc, parse_logical_date, record_order
from ..dataset.paths import check_dataset_root, check_version_id
from ..dataset.publish import publish
from ..dataset.retention import GcReport, RetentionPolicy, collect, plan
from ..dataset.validate import validate_version
from ..errors import InputError, NestedDatasetRoot, PipelineError, VersionError, WebDatasetError
from ..format.sizes import format_size
from ..jobs.validate_spark import spark_check
from .configs import source_problem

VERSION_FORMAT = "%Y%m%dT%H%M%SZ"
ROOT_PARAM = "output_root"  # no longer a Param; a run conf that still names it must name the config's root
RETENTION_PARAMS = ("keep_last", "keep_days")  # Params only of a DAG whose config has `retention:`
# What the Asset event's gc_would_free assumes when the config has no retention: `gc --keep-last 1`
# with gc's default min-age (24h), i.e. what keeping only LATEST (and the last day's versions) would free.
DEFAULT_COST_POLICY = RetentionPolicy(keep_last=1)
# The build rules as a run's Params spell them: the Params form does not enforce them, `plan` does.
PARAM_NAMES = Spelling(change="param change", parent="param parent", order="param order",
                       fix="; set the param parent to LATEST, or change to append")  # fmt: skip


def version_id(
    logical_date: datetime.datetime | None, run_after: datetime.datetime | None, override: str | None = None
) -> str:
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
    if wanted is None or wanted != LATEST:
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


def run_build(params: Mapping[str, Any]) -> BuildBase:
    """The run's change (Param `change`, default append) and parent Param, checked by the build rules,
    with its order and shard cap: a PipelineError in our words, before anything is written."""
    try:
        base = BuildBase.checked(params.get("change") or None, params.get("parent"), PARAM_NAMES)
        check_order(params.get("order"), PARAM_NAMES)
        parse_max_shard_bytes(params.get("max_shard_bytes"), "param max_shard_bytes")
    except InputError as error:
        raise PipelineError(str(error)) from None
    return base


def run_retention(params: Mapping[str, Any], retention: Mapping[str, Any] | None) -> dict | None:
    """The run's gc policy as a dict: the config's `retention` with the Params keep_last / keep_days.

    None when the config has none (its DAG has no gc task): a run may not ask for one.
    """
    given = {name: params[name] for name in RETENTION_PARAMS if name in params}
    if retention is None:
        asked = [name for name, value in given.items() if value is not None]
        if asked:
            raise PipelineError(
                f"param {asked[0]!r}: this dataset's config has no 'retention:', so its DAG has no gc task; "
                "add retention: {keep_last: N} to the config"
            )
        return None
    keep_last = given.get("keep_last", retention["keep_last"])
    if keep_last is None:
        keep_last = retention["keep_last"]
    keep_days = given.get("keep_days", retention.get("keep_days"))
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise PipelineError(f"param 'keep_last': {keep_last!r} is not a whole number of at least 1")
    if keep_days is not None and (
        isinstance(keep_days, bool) or not isinstance(keep_days, (int, float)) or keep_days < 0
    ):
        raise PipelineError(f"param 'keep_days': {keep_days!r} is not a number of days >= 0 (or null)")
    return {"keep_last": keep_last, "keep_days": keep_days, "min_age_seconds": float(retention["min_age"])}


def plan_run(
    params: Mapping[str, Any],
    logical_date,
    run_after,
    root: str,
    conf: Mapping[str, Any] | None = None,
    retention: Mapping[str, Any] | None = None,
) -> dict:
    """Version, URIs, spark-submit arguments and gc policy of one run into `root`, its config's root.

    `conf` is the run's conf as given (Airflow merges it into the Params unless told not to):
    neither may move the run to another root. `retention` is the config's (None: no gc task).
    Every Param is checked here, before anything is written.
    """
    root = confined_root(root, params, conf)
    version = version_id(logical_date, run_after, params.get("version") or None)
    base = run_build(params)
    change, wanted = base.change, base.parent
    policy = run_retention(params, retention)
    moment = logical_date or run_after
    table = params.get("source_table") or None
    if bool(params.get("source")) == bool(table):
        raise PipelineError("give exactly one of the params 'source' (a URI) and 'source_table' (a table)")
    problem = None if table else source_problem(params["source"])
    if problem:
        raise PipelineError(f"param 'source': {problem}")
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
    parent = parent_of(root, version, moment, wanted)
    if parent is not None:
        args += ["--parent", parent, "--change", change]
    elif change == DELETE:  # an upsert with nothing before it is a full build of its source; a delete is nothing
        raise PipelineError(
            f"change 'delete': no version of {root} published for a date before {iso_utc(moment) if moment else 'the run'}"
            " to delete from"
        )
    return {
        "version": version,
        "root": root,
        "version_uri": Dataset(root).version(version).uri,
        "logical_date": iso_utc(moment) if moment else None,
        "source": source,
        "parent": parent,
        "change": change if parent is not None else None,
        "retention": policy,
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
    published: a re-run reports that validation instead of rewriting it. A
    sealed one (a publish that died before its record) is validated again,
    but nothing is written under it: its report is the one publish relied on.
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


def publish_step(
    root: str, version: str, logical_date: str | None = None, retention: Mapping[str, Any] | None = None
) -> dict:
    """Publish the validated version; a refusal is a PipelineError (no retry helps).

    The result carries the version's cost (parent, bytes stored and referenced, the change) and
    `gc_would_free`: what a gc with the run's retention (else DEFAULT_COST_POLICY) would free now.
    """
    try:
        result = publish(root, version, logical_date=logical_date)
    except (VersionError, InputError) as error:  # unfit version, a root inside another dataset or a version
        raise PipelineError(str(error)) from None
    cost = version_cost(root, version)
    cost["gc_would_free"] = gc_would_free(root, version, retention)
    state = "already published (no-op)" if result.already_published else "published"
    built = (
        f"on {cost['parent']}: {format_size(cost['bytes_stored'])} stored, "
        f"{format_size(cost['bytes_referenced'])} referenced"
        if cost["parent"]
        else f"whole: {format_size(cost['bytes_stored'])} stored"
    )
    change = cost.get("change")
    changed = (
        f"; {change['change']}: {change['added']} added, {change['replaced']} replaced, {change['deleted']} deleted, "
        f"{change['shards_rewritten']} shard(s) rewritten"
        if change
        else ""
    )
    would_free = cost["gc_would_free"]
    print(
        f"{state}: version {result.version}: {result.shards} shards, {result.samples} samples, "
        f"{format_size(result.bytes)}; logical date {result.logical_date}; LATEST={result.latest}\n"
        f"  built {built}{changed}\n"
        f"  gc would free: {'unknown' if would_free is None else format_size(would_free)}\n"
        f"  index: {result.index_uri}\n"
        f"  read it: wids.ShardListDataset({result.index_uri!r})",
        flush=True,
    )
    return {**result.as_dict(), **cost}


def version_cost(root: str, version: str) -> dict:
    """What a published version costs: its parent, the bytes its directory stores and those it
    references, and its change (upsert/delete: the counts) when it has one."""
    manifest = Dataset(root).version(version).read_manifest()
    if manifest is None:
        raise PipelineError(f"version {version} of {root} has no manifest")
    stored = sum(shard.bytes for shard in manifest.own_shards)
    cost: dict[str, Any] = {
        "parent": manifest.parent,
        "bytes_stored": stored,
        "bytes_referenced": manifest.bytes - stored,
    }
    if manifest.run.get("change") is not None:
        cost["change"] = dict(manifest.run["change"])
    return cost


def retention_policy(retention: Mapping[str, Any]) -> RetentionPolicy:
    """A policy from `plan_run`'s retention dict (an XCom: plain values)."""
    return RetentionPolicy(retention["keep_last"], retention.get("keep_days"), retention["min_age_seconds"])


def sparing(root: str, version: str, policy: RetentionPolicy, now: float) -> RetentionPolicy:
    """`policy`, widened so that it keeps `version`, the one the run just published.

    LATEST is always kept; but a backfilled date is not LATEST, and with a short min-age its own
    gc would retire it at once. Then min-age is raised to just above its age (keeping, too, any
    version published after it or in the same second: records say the second), never lowered.
    """
    if version not in plan(root, policy, now=now).retired:
        return policy
    record = Dataset(root).read_record(version) or {}
    published_at = record.get("published_at")
    age = now - parse_logical_date(published_at).timestamp() if published_at else 0.0
    return dataclasses.replace(policy, min_age_seconds=max(policy.min_age_seconds, age + 0.001))


def gc_would_free(root: str, version: str, retention: Mapping[str, Any] | None) -> int | None:
    """Bytes a gc with the run's retention (else DEFAULT_COST_POLICY) would free now; None if it cannot tell.

    Only reads. Never fails the publish that asks (the version is published already).
    """
    now = time.time()
    try:
        policy = retention_policy(retention) if retention else DEFAULT_COST_POLICY
        return plan(root, sparing(root, version, policy, now), now=now).bytes_freed
    except (WebDatasetError, OSError) as error:
        print(f"gc would free: cannot tell ({error})", flush=True)
        return None


def gc_step(root: str, version: str, retention: Mapping[str, Any]) -> dict:
    """Run gc on the root after a publish: retire what the run's retention does not keep.

    Never the version just published (`sparing`), nor LATEST, pins, live jobs, or anything younger
    than min-age (an unpublished version another run has yet to validate and publish).
    """
    confined_root(root)
    now = time.time()
    policy = sparing(root, version, retention_policy(retention), now)
    try:
        report: GcReport = collect(root, policy, now=now)
    except (VersionError, InputError) as error:  # not a dataset, a refused version
        raise PipelineError(str(error)) from None
    print(report.summary(), flush=True)
    return {
        "retired": report.retired,
        "removed_unpublished": report.removed_unpublished,
        "kept": len(report.kept),
        "files_deleted": len(report.files_deleted),
        "bytes_freed": report.bytes_freed,
    }
