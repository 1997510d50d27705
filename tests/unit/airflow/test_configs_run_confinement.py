"""Runs confined to their dataset (issue 19), the config side: nested dataset roots are an error naming
both files and the check reads no storage; every task of every DAG has an execution_timeout.
The writer, jobs and publish: tests/integration/test_run_confinement.py; DAG runs: tests/e2e/.
"""

from __future__ import annotations

import datetime

import pytest

from spark_webdataset.airflow.configs import load_config, load_folder
from spark_webdataset.dataset.paths import ROOT_RULE
from tests.support import DAGS
from tests.support.dataset_dags import dagbag_of, write_config

# -- the config loader: pure paths, both files named ---------------------------------------------------------


@pytest.mark.parametrize(
    "outer, inner, how",
    [
        ("/data/ds", "/data/ds/versions/20261101", "lies inside version '20261101' of dataset /data/ds"),
        ("/data/ds", "/data/ds/sub/more", "lies inside the root of dataset /data/ds"),
        ("gs://b/ds", "gs://b/ds/versions/v1/x", "lies inside version 'v1' of dataset gs://b/ds"),
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
    import spark_webdataset.dataset.paths as paths

    def no_storage(uri):
        raise AssertionError(f"storage asked for {uri} while configs were loaded")

    monkeypatch.setattr(layout, "storage_for", no_storage)
    monkeypatch.setattr(paths, "storage_for", no_storage)
    write_config(tmp_path, "a", source="/raw", root="gs://b/ds", key="id")
    write_config(tmp_path, "b", source="/raw", root="gs://b/ds/versions/v1", key="id")
    loaded = load_folder(tmp_path, environ={})
    assert [config.name for config in loaded.configs] == ["a"] and len(loaded.errors) == 1


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
        (
            {"write_shards": "2 hours"},
            "field 'timeouts.write_shards': '2 hours' is not a duration: seconds as a number, or amounts with units",
        ),
        ({"validate": 0}, "field 'timeouts.validate': 0 must be above zero"),
        ({"publish": "-5m"}, "field 'timeouts.publish': '-5m' is not a duration"),
        ({"valdate": "1h"}, "field 'timeouts': 'valdate' is not a task of the DAG; did you mean 'validate'?"),
        ("2h", "field 'timeouts': Input should be a valid dictionary"),
    ],
)
def test_a_bad_timeout_names_the_file_field_and_rule(tmp_path, timeouts, problem) -> None:
    path = write_config(tmp_path, "timed", source="/raw", root="/out/t", key="id", timeouts=timeouts)
    with pytest.raises(Exception) as refused:
        load_config(path, environ={})
    assert str(refused.value).startswith(f"{path}: {problem}"), str(refused.value)


def test_timeouts_and_min_age_read_one_duration_grammar(tmp_path) -> None:
    """Both forms the docs ever showed, in both fields: `1h30m` (timeouts' old grammar), `1.5d` and `2w` (gc's)."""
    path = write_config(tmp_path, "durations", source="/raw", root="/out/d", key="id",
                        timeouts={"write_shards": "1.5d", "validate": "1h30m", "gc": "2w"},
                        retention={"keep_last": 1, "min_age": "1h30m"})  # fmt: skip
    config = load_config(path, environ={})
    assert {task: limit.total_seconds() for task, limit in config.timeouts.items() if task in ("write_shards", "validate", "gc")} == {
        "write_shards": 129600, "validate": 5400, "gc": 1209600,
    }  # fmt: skip
    assert config.retention.min_age == 5400
