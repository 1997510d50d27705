"""Runs confined to their dataset (issue 19): a run's Params or conf cannot move a DAG to another root, no
dataset root may lie inside another dataset's root or a version directory (writer, jobs, publish, the DAG's
tasks, the config loader), and every task of every DAG has an execution_timeout."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest

from dataset_dags import dagbag_of, dataset_dag, write_config
from spark_webdataset.airflow.configs import load_config, load_folder
from spark_webdataset.errors import NestedDatasetRoot, from_spark
from spark_webdataset.dataset.layout import ROOT_RULE, check_dataset_root

REPO = Path(__file__).resolve().parents[1]
DAGS = REPO / "dags"
DAY = datetime.datetime(2026, 11, 20, tzinfo=datetime.timezone.utc)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory below `folder` with its size and mtime: what 'nothing written' compares."""
    if not folder.exists():
        return {}
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
    }


def failed_at_plan(dag_run) -> None:
    states = {ti.task_id: (ti.state, ti.try_number) for ti in dag_run.get_task_instances()}
    assert dag_run.state == "failed", states
    assert states["plan"] == ("failed", 1), states  # at once: retries: 2, yet no retry
    assert {states[t][0] for t in ("write_shards", "validate", "publish")} == {"upstream_failed"}, states


def asset_events(dag_id: str) -> list[dict]:
    from sqlalchemy import select

    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        query = select(AssetEvent).where(AssetEvent.source_dag_id == dag_id)
        return [dict(event.extra) for event in session.scalars(query)]


# -- the DAG: a run cannot name another root ----------------------------------------------------------------


@pytest.fixture
def two_datasets(tmp_path, monkeypatch, digits_source, request) -> tuple[str, Path, Path]:
    """Configs alpha_<test> and beta_<test> (their own roots); beta's root holds a published dataset.

    Names of this test only: an Asset name with a second root in the session's database confuses Airflow."""
    import hashlib

    tag = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:8]
    folder, alpha, beta = tmp_path / "datasets", tmp_path / "alpha", tmp_path / "beta"
    for name, root in ((f"alpha_{tag}", alpha), (f"beta_{tag}", beta)):
        write_config(folder, name, source=digits_source, root=str(root), key="id", fields={"cls": "label"})
    (beta / "versions" / "v1").mkdir(parents=True)
    (beta / "versions" / "v1" / "_manifest.json").write_text("{}")
    (beta / "_published").mkdir()
    (beta / "_published" / "v1.json").write_text("{}")
    (beta / "LATEST").write_text("v1\n")
    monkeypatch.setenv("SPARK_WEBDATASET_DATASETS", str(folder))
    return f"alpha_{tag}", alpha, beta


def test_a_manual_run_naming_another_root_fails_at_plan_and_writes_nothing(
    airflow_db, two_datasets, tmp_path, capfd
) -> None:
    name, alpha, beta = two_datasets
    dag = dataset_dag(name)
    assert "output_root" not in dag.params  # not in the form: the config says where the dataset lives
    before = snapshot(beta)
    elsewhere = tmp_path / "elsewhere"
    for day, conf in enumerate(({"output_root": str(beta)}, {"output_root": str(elsewhere), "version": "pwned"})):
        failed_at_plan(dag.test(run_conf=conf, logical_date=DAY + datetime.timedelta(days=day)))
        captured = capfd.readouterr()
        assert f"param 'output_root' is {conf['output_root']!r}, but a run writes only into its dataset's root" in (
            captured.out + captured.err
        )
    assert snapshot(beta) == before and (beta / "LATEST").read_text() == "v1\n"
    assert not alpha.exists() and not elsewhere.exists()
    assert asset_events(dag.dag_id) == []


def test_the_plan_task_takes_its_root_from_the_config_only(airflow_db, two_datasets) -> None:
    """The plan callable: the config's root (spelt with '/' or file:// too) in the conf is accepted, and the
    version lands under it; any other root, in the Params or in a conf Airflow did not merge, is refused."""
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    name, alpha, beta = two_datasets
    plan = dataset_dag(name).get_task("plan").python_callable
    params = {key: param.value for key, param in dataset_dag(name).params.items()}
    for same in (str(alpha), f"{alpha}/", f"file://{alpha}"):
        run = SimpleNamespace(logical_date=DAY, run_after=DAY, conf={"output_root": same, "version": "v2"})
        planned = plan(params={**params, "output_root": same, "version": "v2"}, dag_run=run)
        assert (planned["root"], planned["version_uri"]) == (str(alpha), str(alpha / "versions" / "v2"))
        job = planned["job_args"]
        assert job[job.index("--output") + 1] == str(alpha)
    with pytest.raises(AirflowFailException, match="param 'output_root'"):  # only in the conf (not merged)
        plan(params=params, dag_run=SimpleNamespace(logical_date=DAY, run_after=DAY, conf={"output_root": str(beta)}))
    with pytest.raises(AirflowFailException, match="param 'output_root'"):
        plan(params={**params, "output_root": str(beta)}, dag_run=SimpleNamespace(logical_date=DAY, run_after=DAY))


@pytest.mark.parametrize("bad", ["../../beta", "../../beta/versions/v1", "v1/../../x"])
def test_a_version_override_outside_the_id_rule_fails_at_plan_and_writes_nothing(
    airflow_db, two_datasets, tmp_path, bad
) -> None:
    name, alpha, beta = two_datasets
    dag = dataset_dag(name)
    # the form says the rule the override must keep
    assert dag.params.get_param("version").description.endswith("[A-Za-z0-9][A-Za-z0-9._-]{0,127}, and no '..'")
    before = snapshot(tmp_path)
    failed_at_plan(dag.test(run_conf={"version": bad}, logical_date=DAY))
    after = {path: state for path, state in snapshot(tmp_path).items() if not path.startswith("datasets")}
    assert after == {path: state for path, state in before.items() if not path.startswith("datasets")}
    assert not alpha.exists() and asset_events(dag.dag_id) == []


# -- a root inside a published version: refused everywhere ---------------------------------------------------


@pytest.fixture(scope="module")
def published_root(spark, digits_source, tmp_path_factory) -> Path:
    """ROOT with version 20261101 written by the data source, validated and published."""
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.dataset.validate import validate_version

    root = tmp_path_factory.mktemp("published") / "root"
    target = root / "versions" / "20261101"
    (
        spark.read.parquet(digits_source)
        .selectExpr("format_string('%05d', id) AS __key__", "label AS cls")
        .write.format("webdataset")
        .mode("overwrite")
        .save(str(target))
    )
    assert validate_version(str(target)).ok
    publish(str(root), "20261101")
    assert (target / "_SEALED").exists() and (root / "LATEST").read_text().strip() == "20261101"
    return root


def test_the_writer_refuses_a_root_inside_a_published_version(spark, published_root) -> None:
    sealed = published_root / "versions" / "20261101"
    before = snapshot(published_root)
    frame = spark.createDataFrame([("k1", "x")], "__key__ string, txt string")
    for target, enclosing in (
        (sealed / "versions" / "v1", "is itself a version directory (it holds _manifest.json)"),
        (sealed / "sub", "lies inside version '20261101' of dataset"),  # a plain directory below it
        (published_root / "elsewhere" / "versions" / "v1", f"lies inside the root of dataset {published_root}"),
    ):
        with pytest.raises(Exception) as refused:
            frame.write.format("webdataset").mode("overwrite").save(str(target))
        error = from_spark(refused.value)
        assert isinstance(error, NestedDatasetRoot), refused.value
        assert enclosing in str(error), error
    assert snapshot(published_root) == before  # no LATEST, _published/ nor versions/ in the sealed directory


def test_the_jobs_refuse_a_root_inside_a_published_version_before_spark_starts(published_root, capsys) -> None:
    from spark_webdataset.jobs.build import main as build_main
    from spark_webdataset.jobs.reshard import main as reshard_main

    inside = published_root / "versions" / "20261101"
    before = snapshot(published_root)
    argv = ["--source", "/nowhere", "--output", str(inside), "--version", "v1", "--key", "id"]
    assert build_main(argv) == 2
    assert f"build_webdataset: error: dataset root {inside} is itself a version directory" in capsys.readouterr().err
    argv = ["--input", str(inside), "--output", str(inside / "deeper"), "--version", "v1"]
    assert reshard_main(argv) == 2
    assert f"lies inside version '20261101' of dataset {published_root}" in capsys.readouterr().err
    assert snapshot(published_root) == before


def test_publish_and_the_pipeline_steps_refuse_a_root_inside_a_published_version(published_root) -> None:
    from spark_webdataset.airflow.pipeline import plan_run, publish_step, validate_step
    from spark_webdataset.errors import PipelineError
    from spark_webdataset.dataset.publish import publish

    inside = str(published_root / "versions" / "20261101")
    before = snapshot(published_root)
    with pytest.raises(NestedDatasetRoot, match=re.escape(f"dataset root {inside} is itself a version directory")):
        publish(inside, "v1")
    with pytest.raises(NestedDatasetRoot, match=re.escape(f"lies inside the root of dataset {published_root}")):
        publish(str(published_root / "other"), "v1")
    params = {"source": "/raw", "source_format": "parquet", "key": "id", "max_shard_bytes": "1MiB", "order": "hash"}
    for step in (
        lambda: plan_run(params, DAY, DAY, inside),  # a config whose root is only known on storage
        lambda: validate_step(inside, "v1"),
        lambda: publish_step(inside, "v1"),
    ):
        with pytest.raises(PipelineError, match="is itself a version directory"):
            step()
    assert snapshot(published_root) == before


def test_the_config_loader_refuses_a_root_inside_another_configs_version(published_root, tmp_path) -> None:
    folder = tmp_path / "datasets"
    write_config(folder, "a_outer", source="/raw", root=str(published_root), key="id")
    inner = write_config(folder, "b_inner", source="/raw", root=str(published_root / "versions" / "20261101"), key="id")
    loaded = load_folder(folder, environ={})
    assert [config.name for config in loaded.configs] == ["a_outer"]
    [error] = loaded.errors
    assert str(error) == (
        f"{inner}: field 'root': dataset root {published_root}/versions/20261101 lies inside version '20261101' "
        f"of dataset {published_root}: {ROOT_RULE} ({str(published_root)!r} is the root of a_outer.yaml)"
    )


# -- the config loader: pure paths, both files named ---------------------------------------------------------


@pytest.mark.parametrize(
    "outer, inner, how",
    [
        ("/data/ds", "/data/ds/versions/20261101", "lies inside version '20261101' of dataset /data/ds"),
        ("/data/ds", "/data/ds/sub/more", "lies inside the root of dataset /data/ds"),
        ("gs://b/ds/", "gs://b/ds/versions/v1/x", "lies inside version 'v1' of dataset gs://b/ds/"),
    ],
)
def test_nested_config_roots_are_an_error_naming_both_files(tmp_path, outer, inner, how) -> None:
    for n, (first, second, rule) in enumerate(  # the later file in name order is refused, whichever way they nest
        [
            (outer, inner, f"dataset root {inner} {how}"),
            (inner, outer, f"dataset root {outer} holds the root of dataset {inner}"),
        ]
    ):
        folder = tmp_path / str(n)
        write_config(folder, "a", source="/raw", root=first, key="id")
        write_config(folder, "a_sibling", source="/raw", root=first.rstrip("/") + "2", key="id")  # not nested
        refused = write_config(folder, "b", source="/raw", root=second, key="id")
        loaded = load_folder(folder, environ={})
        assert [config.name for config in loaded.configs] == ["a", "a_sibling"]
        [error] = loaded.errors
        assert str(error) == f"{refused}: field 'root': {rule}: {ROOT_RULE} ({first!r} is the root of a.yaml)"

def test_the_config_check_reads_no_storage(tmp_path, monkeypatch) -> None:
    """At parse time the nesting rule is path logic: not one storage call, even for gs:// roots."""
    import spark_webdataset.dataset.layout as layout

    def no_storage(uri):
        raise AssertionError(f"storage asked for {uri} while configs were loaded")

    monkeypatch.setattr(layout, "storage_for", no_storage)
    write_config(tmp_path, "a", source="/raw", root="gs://b/ds", key="id")
    write_config(tmp_path, "b", source="/raw", root="gs://b/ds/versions/v1", key="id")
    loaded = load_folder(tmp_path, environ={})
    assert [config.name for config in loaded.configs] == ["a"] and len(loaded.errors) == 1


# -- the rule on gs://: a few exists calls ------------------------------------------------------------------


def test_the_root_check_on_gcs_costs_a_few_exists_calls(bucket, monkeypatch) -> None:
    from spark_webdataset.storage import storage_for
    from spark_webdataset.storage.gcs import GCSStorage

    storage = storage_for(bucket)
    storage.write_atomic(f"{bucket}/ds/LATEST", b"v1\n")
    storage.write_atomic(f"{bucket}/ds/versions/v1/_manifest.json", b"{}")
    calls: list[str] = []
    real_exists = GCSStorage.exists

    def counted(self, path):
        calls.append(path)
        return real_exists(self, path)

    monkeypatch.setattr(GCSStorage, "exists", counted)
    assert check_dataset_root(f"{bucket}/ok/root") == f"{bucket}/ok/root"
    assert len(calls) == 2 + 3 * 2  # the root's two marks, three for each directory above it
    for root, how in (
        (f"{bucket}/ds/versions/v1", "is itself a version directory (it holds _manifest.json)"),
        (f"{bucket}/ds/versions/v1/x", f"lies inside version 'v1' of dataset {bucket}/ds"),
        (f"{bucket}/ds/x", f"lies inside the root of dataset {bucket}/ds (it holds LATEST)"),
    ):
        with pytest.raises(NestedDatasetRoot, match=re.escape(f"dataset root {root} {how}")):
            check_dataset_root(root)


# -- timeouts: every task of every DAG -----------------------------------------------------------------------


def test_every_task_of_every_dag_has_an_execution_timeout(tmp_path, monkeypatch) -> None:
    write_config(tmp_path, "quick", source="/raw", root="/out/quick", key="id", timeouts={"write_shards": "2h"})
    write_config(
        tmp_path, "slow_one", source="/raw", root="/out/slow", key="id",
        timeouts={"plan": 90, "write_shards": "1d", "validate": "1h30m", "publish": "45s"},
    )  # fmt: skip
    monkeypatch.setenv("SPARK_WEBDATASET_DATASETS", str(tmp_path))
    bag = dagbag_of(DAGS)
    assert bag.import_errors == {}
    assert sorted(bag.dag_ids) == ["consume_webdataset", "webdataset__quick", "webdataset__slow_one"]
    for dag in bag.dags.values():
        for task in dag.tasks:
            assert isinstance(task.execution_timeout, datetime.timedelta), (dag.dag_id, task.task_id)
            assert task.execution_timeout > datetime.timedelta(0), (dag.dag_id, task.task_id)
    timeouts = {
        dag_id: {task.task_id: task.execution_timeout.total_seconds() for task in bag.dags[dag_id].tasks}
        for dag_id in ("webdataset__quick", "webdataset__slow_one")
    }
    assert timeouts == {
        "webdataset__quick": {"plan": 600, "write_shards": 7200, "validate": 10800, "publish": 1800},
        "webdataset__slow_one": {"plan": 90, "write_shards": 86400, "validate": 5400, "publish": 45},
    }


@pytest.mark.parametrize(
    "timeouts, problem",
    [
        ({"write_shards": "2 hours"}, "field 'timeouts.write_shards': '2 hours' is not a duration above zero"),
        ({"validate": 0}, "field 'timeouts.validate': 0 is not a duration above zero"),
        ({"publish": "-5m"}, "field 'timeouts.publish': '-5m' is not a duration above zero"),
        ({"valdate": "1h"}, "field 'timeouts': 'valdate' is not a task of the DAG; did you mean 'validate'?"),
        ("2h", "field 'timeouts': Input should be a valid dictionary"),
    ],
)
def test_a_bad_timeout_names_the_file_field_and_rule(tmp_path, timeouts, problem) -> None:
    path = write_config(tmp_path, "timed", source="/raw", root="/out/t", key="id", timeouts=timeouts)
    with pytest.raises(Exception) as refused:
        load_config(path, environ={})
    assert str(refused.value).startswith(f"{path}: {problem}"), str(refused.value)
