"""spark_webdataset.airflow.pipeline without Airflow: what a run plans from its Params."""

from __future__ import annotations

import datetime

import pytest

from spark_webdataset.airflow import pipeline
from spark_webdataset.errors import PipelineError

UTC = datetime.timezone.utc
ROOT = "/data/out/"  # the dataset config's root: a run's Params no longer give it


def plan_run(params: dict, logical_date, run_after) -> dict:
    return pipeline.plan_run(params, logical_date, run_after, ROOT)


def params(**changes) -> dict:
    base = {
        "source": "/data/raw",
        "source_table": None,
        "source_format": "parquet",
        "key": "format_string('%05d', id)",
        "fields": ["png=image", "cls=label"],
        "max_shard_bytes": "3GiB",
        "max_samples_per_shard": None,
        "order": "hash",
        "version": None,
    }
    return {**base, **changes}


def flags(args: list[str]) -> list[tuple[str, str | None]]:
    """The job arguments as (flag, value) pairs, in order; a flag without a value pairs with None."""
    pairs, index = [], 0
    while index < len(args):
        flag = args[index]
        assert flag.startswith("--"), args
        if index + 1 < len(args) and not args[index + 1].startswith("--"):
            pairs.append((flag, args[index + 1]))
            index += 2
        else:
            pairs.append((flag, None))
            index += 1
    return pairs


def test_plan_gives_the_job_every_param_as_its_flag() -> None:
    moment = datetime.datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
    planned = plan_run(params(max_samples_per_shard=500, order="source", source_format="json"), moment, moment)
    assert planned["version"] == "20261201T000000Z"
    assert planned["root"] == "/data/out/"
    assert planned["version_uri"] == "/data/out/versions/20261201T000000Z"
    assert planned["source"] == "/data/raw"
    assert flags(planned["job_args"]) == [
        ("--source", "/data/raw"),
        ("--source-format", "json"),
        ("--output", "/data/out/"),
        ("--version", "20261201T000000Z"),
        ("--key", "format_string('%05d', id)"),
        ("--max-shard-bytes", "3GiB"),
        ("--order", "source"),
        ("--skip-if-published", None),
        ("--field", "png=image"),
        ("--field", "cls=label"),
        ("--max-samples-per-shard", "500"),
    ]


def test_plan_leaves_out_unset_caps_and_fields() -> None:
    moment = datetime.datetime(2026, 12, 1, tzinfo=UTC)
    args = plan_run(params(fields=[], max_samples_per_shard=None), moment, None)["job_args"]
    assert "--max-samples-per-shard" not in args and "--field" not in args
    args = plan_run(params(max_shard_bytes=1048576), moment, None)["job_args"]
    assert args[args.index("--max-shard-bytes") + 1] == "1048576"  # an int Param still reaches argv as text


def test_version_comes_from_the_logical_date_in_utc() -> None:
    logical = datetime.datetime(2026, 11, 3, 1, 2, 3, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    later = datetime.datetime(2027, 1, 1, tzinfo=UTC)
    planned = plan_run(params(), logical, later)  # run_after is later: the logical date wins
    assert planned["version"] == "20261102T230203Z"
    assert planned["version_uri"] == "/data/out/versions/20261102T230203Z"
    assert planned["logical_date"] == "2026-11-02T23:02:03Z"  # what publish records to order LATEST by


def test_a_manual_run_without_logical_date_uses_run_after() -> None:
    run_after = datetime.datetime(2026, 11, 5, 14, 30, 59, tzinfo=UTC)
    planned = plan_run(params(), None, run_after)
    assert planned["version"] == "20261105T143059Z"
    assert planned["logical_date"] == "2026-11-05T14:30:59Z"


def test_the_version_param_overrides_the_dates() -> None:
    moment = datetime.datetime(2026, 11, 5, tzinfo=UTC)
    planned = plan_run(params(version="backup-1"), moment, moment)
    assert planned["version"] == "backup-1"
    assert planned["version_uri"] == "/data/out/versions/backup-1"
    args = planned["job_args"]
    assert args[args.index("--version") + 1] == "backup-1"
    assert plan_run(params(version=""), moment, moment)["version"] == "20261105T000000Z"  # empty form field


@pytest.mark.parametrize("bad", ["../x", "a/b", ".hidden", "v..1", "x" * 129, "sp ace"])
def test_a_version_param_outside_the_id_rule_is_refused(bad) -> None:
    moment = datetime.datetime(2026, 11, 5, tzinfo=UTC)
    with pytest.raises(PipelineError, match="version"):
        plan_run(params(version=bad), moment, moment)


def test_a_run_without_any_date_or_version_is_refused() -> None:
    with pytest.raises(PipelineError, match="version"):
        plan_run(params(), None, None)


def test_source_placeholders_are_filled_from_the_run() -> None:
    logical = datetime.datetime(2026, 11, 30, 23, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=-3)))
    planned = plan_run(params(source="gs://raw/{ds}/{ds_nodash}/{version}/*.parquet"), logical, None)
    # 23:00 at UTC-3 is the next day in UTC: the day and the version agree
    assert planned["source"] == "gs://raw/2026-12-01/20261201/20261201T020000Z/*.parquet"
    args = planned["job_args"]
    assert args[args.index("--source") + 1] == planned["source"]
    manual = plan_run(params(source="/raw/{ds}/{version}"), None, datetime.datetime(2026, 11, 7, 8, tzinfo=UTC))
    assert manual["source"] == "/raw/2026-11-07/20261107T080000Z"
    override = plan_run(
        params(source="/raw/{ds_nodash}-{version}", version="v2"), datetime.datetime(2026, 11, 8, tzinfo=UTC), None
    )
    assert override["source"] == "/raw/20261108-v2"


def test_a_table_source_replaces_source_and_format() -> None:
    moment = datetime.datetime(2026, 12, 1, tzinfo=UTC)
    planned = plan_run(params(source=None, source_table="db.images"), moment, None)
    assert planned["source"] == "db.images"
    assert flags(planned["job_args"])[:2] == [("--source-table", "db.images"), ("--output", "/data/out/")]
    assert "--source" not in planned["job_args"] and "--source-format" not in planned["job_args"]


@pytest.mark.parametrize("source, table", [("/data/raw", "db.images"), (None, None), ("", "")])
def test_a_run_needs_exactly_one_of_source_and_table(source, table) -> None:
    moment = datetime.datetime(2026, 12, 1, tzinfo=UTC)
    with pytest.raises(PipelineError, match="exactly one of the params 'source' .* and 'source_table'"):
        plan_run(params(source=source, source_table=table), moment, None)
