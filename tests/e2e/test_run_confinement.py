"""Runs confined to their dataset (issue 19), in DAG runs (dag.test()): a run's Params or conf cannot
move a DAG to another root or version id; nothing is written.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from tests.support.dataset_dags import DAY, dataset_dag, write_config
from tests.support.helpers import snapshot_files


def failed_at_plan(dag_run) -> None:
    states = {ti.task_id: (ti.state, ti.try_number) for ti in dag_run.get_task_instances()}
    assert dag_run.state == "failed", states
    assert states["plan"] == ("failed", 1), states  # at once: retries: 2, yet no retry
    assert {states[t][0] for t in ("write_shards", "validate", "publish")} == {"upstream_failed"}, states


def asset_events(dag_id: str) -> list[dict]:
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import select

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
    before = snapshot_files(beta)
    elsewhere = tmp_path / "elsewhere"
    for day, conf in enumerate(({"output_root": str(beta)}, {"output_root": str(elsewhere), "version": "pwned"})):
        failed_at_plan(dag.test(run_conf=conf, logical_date=DAY + datetime.timedelta(days=day)))
        captured = capfd.readouterr()
        assert f"param 'output_root' is {conf['output_root']!r}, but a run writes only into its dataset's root" in (
            captured.out + captured.err
        )
    assert snapshot_files(beta) == before and (beta / "LATEST").read_text() == "v1\n"
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
    before = snapshot_files(tmp_path)
    failed_at_plan(dag.test(run_conf={"version": bad}, logical_date=DAY))
    after = {path: state for path, state in snapshot_files(tmp_path).items() if not path.startswith("datasets")}
    assert after == {path: state for path, state in before.items() if not path.startswith("datasets")}
    assert not alpha.exists() and asset_events(dag.dag_id) == []


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"change": "bogus"}, "param change='bogus' is not one of append, upsert, delete"),
        ({"order": "random"}, "param order='random' is not one of hash, key, source"),
        ({"change": "upsert", "parent": None}, "param change='upsert' needs param parent (LATEST or a version id)"),
    ],
)
def test_a_bad_build_param_is_refused_by_plan_in_our_words(airflow_db, two_datasets, capfd, conf, message) -> None:
    """The Params form takes any text for change and order (its schema would refuse with a traceback at
    trigger, in Airflow's words); `plan` refuses it with the build rules' message, and nothing is written."""
    name, alpha, _ = two_datasets
    dag = dataset_dag(name)
    assert "enum" not in dag.params.get_param("change").schema and "enum" not in dag.params.get_param("order").schema
    failed_at_plan(dag.test(run_conf=conf, logical_date=DAY))
    captured = capfd.readouterr()
    assert message in captured.out + captured.err
    assert not alpha.exists() and asset_events(dag.dag_id) == []
