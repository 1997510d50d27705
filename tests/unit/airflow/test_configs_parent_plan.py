"""A dataset config's `build: {parent: LATEST}`: each run builds on the version published for the date
before its own, so a backfill builds on its own past (never on a later day's version)."""

from __future__ import annotations

import datetime

import pytest

from spark_webdataset.airflow import pipeline
from spark_webdataset.airflow.configs import BuildSettings
from tests.support.webdataset_ui_data import digits_table, published_digits


def _day(day: int) -> datetime.datetime:
    return datetime.datetime(2026, 11, day, tzinfo=datetime.timezone.utc)


def test_latest_means_the_version_published_before_the_runs_date(tmp_path) -> None:
    root = tmp_path / "root"
    for version in ("20261101T000000Z", "20261103T000000Z"):
        published_digits(root, version, digits_table().slice(0, 20))
    parent = lambda day, wanted="LATEST": pipeline.parent_of(str(root), f"202611{day:02d}T000000Z", _day(day), wanted)  # noqa: E731
    assert parent(2) == "20261101T000000Z"  # a backfill between the two
    assert parent(4) == "20261103T000000Z"
    assert parent(3) == "20261101T000000Z"  # a re-run of a published date builds on the one before it
    assert parent(1) is None  # nothing before: a full build
    assert parent(2, None) is None and parent(2, "20261103T000000Z") == "20261103T000000Z"
    params = {"source": "/src/{ds}", "source_format": "parquet", "key": "id", "max_shard_bytes": "1MiB",
              "order": "hash", "fields": [], "parent": "LATEST"}  # fmt: skip
    planned = pipeline.plan_run(params, _day(2), _day(2), str(root))
    assert planned["job_args"][-4:] == ["--parent", "20261101T000000Z", "--change", "append"]
    assert "--parent" not in pipeline.plan_run(params, _day(1), _day(1), str(root))["job_args"]


def test_the_build_section_is_checked() -> None:
    assert BuildSettings(parent="LATEST").parent == "LATEST" and BuildSettings().parent is None
    with pytest.raises(ValueError, match="version id"):
        BuildSettings(parent="../other")
    assert BuildSettings(parent="LATEST", change="upsert").change == "upsert"
    with pytest.raises(ValueError, match="needs parent"):
        BuildSettings(change="upsert")
    with pytest.raises(ValueError):
        BuildSettings(parent="LATEST", change="merge")
