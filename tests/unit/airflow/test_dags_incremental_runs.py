"""A dataset config's `build: {change}` and `retention:`, the Params that override them for one run,
the gc task after publish and the cost the publish reports (parent, bytes stored/referenced, what gc
would free). Chains of versions come from tests/support/chains (no Spark)."""

from __future__ import annotations

import datetime
import re
import time

import pytest

from spark_webdataset.airflow import pipeline
from spark_webdataset.airflow.configs import DatasetConfig, RetentionSettings, load_config
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.errors import DatasetConfigError, PipelineError
from tests.support.chains import build_chain, commit_version, publish_version
from tests.support.dataset_dags import write_config

MINIMAL = {"source": "/src/{ds}", "root": "/out/images", "key": "id"}
PARAMS = {"source": "/src/{ds}", "source_format": "parquet", "key": "id", "max_shard_bytes": "1MiB",
          "order": "hash", "fields": [], "parent": "LATEST", "change": "upsert"}  # fmt: skip
IDS = ["20261101T000000Z", "20261102T000000Z", "20261103T000000Z"]


def _day(day: int) -> datetime.datetime:
    return datetime.datetime(2026, 11, day, tzinfo=datetime.timezone.utc)


# -- the config ------------------------------------------------------------------------------------


def test_upsert_or_delete_without_a_parent_names_the_file_and_the_rule(tmp_path) -> None:
    for change in ("upsert", "delete"):
        path = write_config(tmp_path, f"no_parent_{change}", **MINIMAL, build={"change": change})
        with pytest.raises(DatasetConfigError) as error:
            load_config(path)
        assert str(error.value) == (
            f"{path}: field 'build': change={change!r} needs parent (LATEST or a version id): the version it "
            "changes; write parent: LATEST, or change: append"
        )
    path = write_config(tmp_path, "bad_change", **MINIMAL, build={"change": "merge", "parent": "LATEST"})
    with pytest.raises(DatasetConfigError, match="build.change"):
        load_config(path)
    upsert = load_config(write_config(tmp_path, "ok", **MINIMAL, build={"change": "upsert", "parent": "LATEST"}))
    assert (upsert.build.change, upsert.build.parent, upsert.retention) == ("upsert", "LATEST", None)


def test_the_retention_section(tmp_path) -> None:
    config = load_config(
        write_config(tmp_path, "r", **MINIMAL, retention={"keep_last": 2, "keep_days": 7, "min_age": "30m"})
    )
    assert config.retention == RetentionSettings(keep_last=2, keep_days=7.0, min_age=1800.0)
    assert config.retention.policy().min_age_seconds == 1800.0
    assert config.retention.policy(keep_last=5, keep_days=None).keep_days is None  # a run cleared the day rule
    assert RetentionSettings(keep_last=1).min_age == 24 * 3600  # gc's own default
    assert RetentionSettings(keep_last=1, min_age="0s").min_age == 0.0
    for bad, where in [({"keep_last": 0}, "retention.keep_last"), ({"keep_days": 3}, "retention.keep_last"),
                       ({"keep_last": 1, "keep_days": -1}, "retention.keep_days"),
                       ({"keep_last": 1, "min_age": "soon"}, "retention.min_age"),
                       ({"keep_last": 1, "keep": 3}, "retention.keep")]:  # fmt: skip
        path = write_config(tmp_path, "bad", **MINIMAL, retention=bad)
        with pytest.raises(DatasetConfigError) as error:
            load_config(path)
        assert str(error.value).startswith(f"{path}: field {where!r}: "), str(error.value)
    assert DatasetConfig.model_fields["retention"].default is None


def test_a_dag_has_a_gc_task_and_its_params_only_with_retention(tmp_path) -> None:
    from spark_webdataset.airflow.dags import build_dags

    write_config(tmp_path, "plain", **MINIMAL)
    write_config(tmp_path, "kept", **{**MINIMAL, "root": "/out/kept"}, build={"change": "upsert", "parent": "LATEST"},
                 retention={"keep_last": 3, "min_age": "1h"}, timeouts={"gc": "10m"})  # fmt: skip
    built = build_dags(tmp_path)
    assert built.errors == []
    plain, kept = built.dags["webdataset__plain"], built.dags["webdataset__kept"]
    assert "gc" not in plain.task_ids and not {"keep_last", "keep_days"} & set(plain.params)
    assert plain.params["change"] == "append"
    gc = kept.get_task("gc")
    assert gc.upstream_task_ids == {"plan", "publish"} and gc.execution_timeout == datetime.timedelta(minutes=10)
    assert (kept.params["change"], kept.params["keep_last"], kept.params["keep_days"]) == ("upsert", 3, None)
    assert kept.params.get_param("change").schema["examples"] == ["append", "upsert", "delete"]  # plan checks it


# -- a run's Params: checked at plan, before anything is written ------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"change": "merge"}, "param change='merge' is not one of append, upsert, delete"),
        (
            {"parent": None},
            "param change='upsert' needs param parent (LATEST or a version id): the version it changes; "
            "set the param parent to LATEST, or change to append",
        ),
        ({"order": "random"}, "param order='random' is not one of hash, key, source"),
        ({"max_shard_bytes": "lots"}, "param max_shard_bytes='lots' is not a byte size"),
        ({"keep_last": 0}, "param 'keep_last': 0 is not a whole number of at least 1"),
        ({"keep_last": "2"}, "param 'keep_last'"),
        ({"keep_days": -1}, "param 'keep_days'"),
        ({"parent": "../x"}, "param parent='../x' is not LATEST or a version id"),
    ],
)
def test_a_bad_param_fails_the_plan_with_nothing_written(tmp_path, override, message) -> None:
    root = tmp_path / "root"
    retention = {"keep_last": 2, "keep_days": None, "min_age": 0.0}
    with pytest.raises(PipelineError, match=re.escape(message)):
        pipeline.plan_run({**PARAMS, **override}, _day(2), _day(2), str(root), retention=retention)
    assert not root.exists()


def test_retention_params_without_retention_in_the_config_fail_the_plan(tmp_path) -> None:
    with pytest.raises(PipelineError, match="has no 'retention:'"):
        pipeline.plan_run({**PARAMS, "keep_last": 3}, _day(2), _day(2), str(tmp_path / "root"))
    assert pipeline.plan_run({**PARAMS, "keep_last": None}, _day(2), _day(2), str(tmp_path / "r"))["retention"] is None


def test_the_plan_passes_the_change_with_the_parent_and_the_runs_retention(tmp_path) -> None:
    root = tmp_path / "root"
    build_chain(root, IDS[:1], per_version=10)
    retention = {"keep_last": 2, "keep_days": 7.0, "min_age": 3600.0}
    planned = pipeline.plan_run(PARAMS, _day(2), _day(2), str(root), retention=retention)
    assert planned["job_args"][-4:] == ["--parent", IDS[0], "--change", "upsert"]
    assert (planned["parent"], planned["change"]) == (IDS[0], "upsert")
    assert planned["retention"] == {"keep_last": 2, "keep_days": 7.0, "min_age_seconds": 3600.0}
    overridden = pipeline.plan_run(
        {**PARAMS, "keep_last": 5, "keep_days": None}, _day(2), _day(2), str(root), retention=retention
    )
    assert overridden["retention"] == {"keep_last": 5, "keep_days": None, "min_age_seconds": 3600.0}
    # the first date (nothing published before it): an upsert is a full build of its source
    first = pipeline.plan_run(PARAMS, _day(1), _day(1), str(root))
    assert "--parent" not in first["job_args"] and "--change" not in first["job_args"] and first["change"] is None
    # a delete needs something to delete from
    with pytest.raises(PipelineError, match="change 'delete': no version .* published for a date before"):
        pipeline.plan_run({**PARAMS, "change": "delete"}, _day(1), _day(1), str(root))
    deleting = pipeline.plan_run({**PARAMS, "change": "delete"}, _day(2), _day(2), str(root))
    assert deleting["job_args"][-4:] == ["--parent", IDS[0], "--change", "delete"]


# -- publish's cost and the gc task -----------------------------------------------------------------


def test_publish_reports_the_cost_and_what_gc_would_free(tmp_path, capsys) -> None:
    root = str(tmp_path / "root")
    build_chain(root, IDS[:2], per_version=40)
    commit_version(root, IDS[2], 80, 10, parent=IDS[1])
    from spark_webdataset.dataset.validate import validate_version

    assert validate_version(Dataset(root).version(IDS[2]).uri, workers=1, progress=False).ok
    policy = {"keep_last": 1, "keep_days": None, "min_age_seconds": 0.0}
    result = pipeline.publish_step(root, IDS[2], "2026-11-03T00:00:00Z", policy)
    stored = sum(p.stat().st_size for p in (tmp_path / "root" / "versions" / IDS[2]).glob("*.tar"))
    assert (result["parent"], result["bytes_stored"]) == (IDS[1], stored)
    assert result["bytes_referenced"] == result["bytes"] - stored > stored  # the parents hold most of it
    assert "change" not in result  # an append: the manifest has no change counts
    # keep_last 1: the two parents' records and whatever of theirs v3 does not reference
    assert result["gc_would_free"] == pipeline.plan(root, pipeline.retention_policy(policy)).bytes_freed > 0
    assert f"built on {IDS[1]}" in capsys.readouterr().out
    # with no retention configured: `gc --keep-last 1` with its default min-age: all just published, nothing
    assert pipeline.gc_would_free(root, IDS[2], None) == 0
    from spark_webdataset.airflow.dags import event_extra

    extra = event_extra(root, result)
    assert set(extra) == {"root", "index", "version", "uri", "samples", "shards", "bytes", "parent",
                          "bytes_stored", "bytes_referenced", "gc_would_free"}  # fmt: skip


def test_gc_keeps_latest_and_the_version_just_published_even_a_backfill(tmp_path, capsys) -> None:
    root = str(tmp_path / "root")
    build_chain(root, IDS, per_version=20)
    policy = {"keep_last": 1, "keep_days": None, "min_age_seconds": 0.0}
    time.sleep(1.05)  # records say the second they were published: the backfill's is a later one
    # a backfill of 2026-10-31 published last: not LATEST, and the oldest by date
    publish_version(root, "20261031T000000Z", 500, 5, logical_date="2026-10-31T00:00:00Z")
    counts = pipeline.gc_step(root, "20261031T000000Z", policy)
    dataset = Dataset(root)
    assert "20261031T000000Z" in dataset.published_ids() and dataset.read_latest() == IDS[2]
    assert counts["retired"] == IDS[:2] and counts["bytes_freed"] > 0 and counts["kept"] == 2
    assert "retired  20261101T000000Z" in capsys.readouterr().out
    # the next gc (min-age 0) has nothing protecting the backfill any more but its own run
    assert pipeline.gc_step(root, IDS[2], policy)["retired"] == ["20261031T000000Z"]
    assert dataset.published_ids() == [IDS[2]]


def test_the_view_shows_what_gc_would_free_with_the_configs_retention(tmp_path) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from spark_webdataset.airflow.ui.app import create_app

    root = tmp_path / "root"
    build_chain(root, IDS, per_version=20)
    configs = tmp_path / "datasets"
    write_config(configs, "kept", source="/src", root=str(root), key="id", retention={"keep_last": 2, "min_age": "0s"})
    write_config(configs, "plain", source="/src", root=str(tmp_path / "other"), key="id")
    build_chain(tmp_path / "other", IDS[:1], per_version=5)
    app = create_app(configs)
    app.dependency_overrides[app.state.user_dependency] = lambda: "tester"
    client = TestClient(app)
    cost = client.get("/api/datasets/kept/versions").json()["gc_would_free"]
    assert (cost["configured"], cost["keep_last"], cost["retire"]) == (True, 2, [IDS[0]])
    assert cost["bytes"] == pipeline.plan(str(root), pipeline.retention_policy(
        {"keep_last": 2, "keep_days": None, "min_age_seconds": 0.0})).bytes_freed > 0  # fmt: skip
    page = client.get("/datasets/kept").text
    assert "the config's retention: keep_last 2" in page and f"retiring {IDS[0]}" in page
    plain = client.get("/api/datasets/plain/versions").json()["gc_would_free"]
    assert (plain["configured"], plain["keep_last"], plain["bytes"]) == (False, 1, 0)  # LATEST alone
    assert "no retention configured" in client.get("/datasets/plain").text
