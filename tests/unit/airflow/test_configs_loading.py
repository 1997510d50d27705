"""Dataset configs without Spark: the schema, its errors (file, field, rule), and the DAG each config gives."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from spark_webdataset.airflow.configs import DatasetConfig, datasets_folder, load_config, load_folder
from spark_webdataset.errors import DatasetConfigError, InvalidDatasetConfigs
from tests.support import REPO
from tests.support.dataset_dags import write_config

MINIMAL = {"source": "/raw/{ds}", "root": "/out/ds", "key": "id"}


def test_the_demo_config_gives_the_demo_defaults() -> None:
    config = load_config(REPO / "datasets" / "digits.yaml", environ={})
    data = REPO / "data"
    assert (config.name, config.dag_id, config.asset_name) == ("digits", "webdataset__digits", "webdataset_digits")
    assert config.source == f"{data}/demo/digits" and config.source_format == "parquet"
    assert config.root == f"{data}/datasets/digits"
    assert config.asset_uri == f"file://{data}/datasets/digits"
    assert config.key == "format_string('%05d', id)"
    assert config.field_args == ["png=image", "cls=label", "json=meta"]  # member order = file order
    assert (config.max_shard_bytes, config.max_samples_per_shard, config.order) == ("1MiB", None, "hash")
    assert config.schedule == "@daily" and config.catchup is False
    assert config.start_date == datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc)
    assert config.spark.conn_id == "spark_default" and config.spark.py_files is None  # ${..:-} left empty
    assert config.path == REPO / "datasets" / "digits.yaml"


def test_the_data_folder_and_py_files_come_from_the_environment() -> None:
    environ = {"SPARK_WEBDATASET_DATA": "/srv/d", "SPARK_WEBDATASET_PY_FILES": "/opt/p.zip"}
    config = load_config(REPO / "datasets" / "digits.yaml", environ=environ)
    assert (config.source, config.root) == ("/srv/d/demo/digits", "/srv/d/datasets/digits")
    assert config.spark.py_files == "/opt/p.zip"


def test_a_blank_optional_value_means_unset(tmp_path) -> None:
    path = write_config(
        tmp_path, "blank", **MINIMAL, source_table="  ", schedule="", validation={"spark_master": " "},
        spark={"py_files": ""},
    )  # fmt: skip
    config = load_config(path, environ={})
    assert (config.source, config.source_table, config.schedule) == ("/raw/{ds}", None, None)
    assert config.validation.spark_master is None and config.spark.py_files is None


def test_datasets_folder_from_the_environment() -> None:
    assert datasets_folder({}) == REPO / "datasets"
    assert datasets_folder({"SPARK_WEBDATASET_DATASETS": "/etc/ds"}) == Path("/etc/ds")
    assert datasets_folder({"SPARK_WEBDATASET_DATASETS": "conf/ds"}) == REPO / "conf" / "ds"


def test_name_defaults_to_the_file_stem_and_a_given_name_wins(tmp_path) -> None:
    assert load_config(write_config(tmp_path, "imagenet-1k", **MINIMAL), environ={}).name == "imagenet-1k"
    assert load_config(write_config(tmp_path, "x", name="other", **MINIMAL), environ={}).dag_id == "webdataset__other"


def test_relative_local_paths_are_relative_to_the_config_folder(tmp_path) -> None:
    path = write_config(
        tmp_path / "conf", "rel", source="raw/{ds}/*.parquet", root="../out/rel", key="id",
        spark={"py_files": "dist/a.zip, /abs/b.zip,gs://c/d.zip"},
    )  # fmt: skip
    config = load_config(path, environ={})
    assert config.source == f"{tmp_path}/conf/raw/{{ds}}/*.parquet"
    assert config.root == f"{tmp_path}/out/rel"
    assert config.spark.py_files == f"{tmp_path}/conf/dist/a.zip,/abs/b.zip,gs://c/d.zip"
    remote = load_config(write_config(tmp_path, "gs", source="gs://raw/{ds}", root="gs://b/ds", key="id"), environ={})
    assert (remote.source, remote.root, remote.asset_uri) == ("gs://raw/{ds}", "gs://b/ds", "gs://b/ds")


def test_environment_references_with_defaults(tmp_path) -> None:
    path = write_config(tmp_path, "env", source="${RAW}/{ds}", root="${OUT:-/fallback}/env", key="id")
    config = load_config(path, environ={"RAW": "gs://raw"})
    assert (config.source, config.root) == ("gs://raw/{ds}", "/fallback/env")
    with pytest.raises(DatasetConfigError) as raised:
        load_config(path, environ={})
    assert str(raised.value) == (
        f"{path}: field 'source': environment variable RAW is not set (write ${{RAW:-default}} for a default)"
    )


def test_spark_conf_values_become_text_and_a_table_replaces_the_source(tmp_path) -> None:
    path = write_config(
        tmp_path, "table", source_table="db.images", root="/out/t", key="id",
        spark={"conn_id": "spark_yarn", "conf": {"spark.executor.cores": 2, "spark.dynamicAllocation.enabled": True}},
        validation={"required_fields": ["jpg"], "spark_master": "spark://m:7077"}, fields={"jpg": "bytes"},
    )  # fmt: skip
    config = load_config(path, environ={})
    assert config.source is None and config.source_table == "db.images"
    assert config.spark.conf == {"spark.executor.cores": "2", "spark.dynamicAllocation.enabled": "true"}
    assert config.validation.required_fields == ["jpg"] and config.validation.spark_master == "spark://m:7077"


BAD = [
    ({"max_shard_bytes": "3 GB?"}, "max_shard_bytes", "is not a byte size"),
    ({"max_shard_bytes": 0}, "max_shard_bytes", "must be positive"),
    ({"max_samples_per_shard": 0}, "max_samples_per_shard", "greater than 0"),
    ({"order": "random"}, "order", "order='random' is not one of hash, key, source"),
    ({"fields": {"PNG": "image"}}, "fields", "extension 'PNG': field names must be lower case"),
    ({"fields": {"__key__x__": "a"}}, "fields", "reserved column name"),
    ({"fields": {"png": "  "}}, "fields", "give the column or SQL that fills it"),
    ({"source": "/raw/{date}"}, "source", "unknown placeholder {date}; a source may use {ds}, {ds_nodash}, {version}"),
    ({"source_table": "db.t"}, "source", "give exactly one of 'source'"),
    ({"source": None}, "source", "give exactly one of 'source'"),
    ({"key": ""}, "key", "at least 1 character"),
    ({"root": None}, "root", "valid string"),
    ({"name": "Big Data"}, "name", "'Big Data' is not a dataset name"),
    ({"catchup": True}, "start_date", "required with 'catchup: true'"),
    ({"retries": -1}, "retries", "greater than or equal to 0"),
    ({"start_date": "yesterday"}, "start_date", "valid datetime"),
    ({"sourc_format": "orc"}, "sourc_format", "unknown field; did you mean 'source_format'?"),
    ({"spark": {"confs": {}}}, "spark.confs", "unknown field; did you mean 'conf'? the fields are: conn_id, conf, py_files"),
    ({"validation": {"required_fields": ["txt"]}, "fields": {"png": "image"}}, "validation.required_fields", "'txt' is not one of the fields (png)"),
]  # fmt: skip


@pytest.mark.parametrize("change, field, rule", BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_an_invalid_value_names_the_file_the_field_and_the_rule(tmp_path, change, field, rule) -> None:
    path = write_config(tmp_path, "bad", **{**MINIMAL, **change})
    with pytest.raises(DatasetConfigError) as raised:
        load_config(path, environ={})
    assert raised.value.path == path
    assert [name for name, _ in raised.value.problems] == [field]
    assert str(raised.value).startswith(f"{path}: field {field!r}: ")
    assert rule in str(raised.value)


def test_a_missing_required_field_and_several_problems_are_all_named(tmp_path) -> None:
    path = write_config(tmp_path, "bad", source="/raw", order="random", colour="blue")
    with pytest.raises(DatasetConfigError) as raised:
        load_config(path, environ={})
    problems = dict(raised.value.problems)
    assert problems.keys() == {"root", "key", "order", "colour"}
    assert problems["root"] == problems["key"] == "required, and missing"
    assert str(raised.value).startswith(f"{path}: 4 problems:\n  field ")


@pytest.mark.parametrize(
    "text, rule",
    [
        ("source: /x\nroot: [/r\nkey: id\n", "line 3, column 4: not valid YAML: expected ',' or ']'"),
        ("- source: /x\n", "the file must hold a mapping of fields (name, source, root, ...), not a list"),
        ("", "field 'root': required, and missing"),
    ],
)
def test_a_file_that_is_not_a_mapping_of_fields(tmp_path, text, rule) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(DatasetConfigError) as raised:
        load_config(path, environ={})
    assert str(raised.value).startswith(f"{path}: ") and rule in str(raised.value)


def test_a_folder_loads_every_good_file_and_names_each_bad_one(tmp_path) -> None:
    write_config(tmp_path, "a", **MINIMAL)
    write_config(tmp_path, "b", **{**MINIMAL, "max_shard_bytes": "lots"})
    write_config(tmp_path, "c", **{**MINIMAL, "root": "/out/c"})
    write_config(tmp_path, "d", **{**MINIMAL, "name": "a", "root": "/out/d"})  # a's name again
    write_config(tmp_path, "e", **{**MINIMAL, "root": "/out/ds/"})  # a's root again
    (tmp_path / "notes.txt").write_text("not a config")
    (tmp_path / ".hidden.yaml").write_text("- not read")
    loaded = load_folder(tmp_path, environ={})
    assert [c.name for c in loaded.configs] == ["a", "c"]
    assert [(e.path.name, e.problems[0][0]) for e in loaded.errors] == [
        ("b.yaml", "max_shard_bytes"), ("d.yaml", "name"), ("e.yaml", "root"),
    ]  # fmt: skip
    assert "'a' is also the name of a.yaml" in str(loaded.errors[1])
    assert "'/out/ds' is also the root of a.yaml; two DAGs cannot publish into one dataset" in str(loaded.errors[2])
    summary = str(InvalidDatasetConfigs(loaded.errors))
    assert summary.startswith("3 dataset configs cannot be used (every other dataset's DAG loads):\n")
    assert summary.count(str(tmp_path)) == 3


def test_a_missing_folder_is_one_error_naming_it(tmp_path) -> None:
    loaded = load_folder(tmp_path / "nowhere", environ={})
    assert loaded.configs == []
    [error] = loaded.errors
    assert str(error) == (
        f"{tmp_path / 'nowhere'}: the datasets folder does not exist "
        "(set SPARK_WEBDATASET_DATASETS to the folder of dataset configs)"
    )


def test_a_folder_name_the_system_refuses_is_one_error_not_an_oserror() -> None:
    """Found by tests/model/test_public_api_typed.py: Path.is_dir() raises ENAMETOOLONG."""
    loaded = load_folder("x" * 5000, environ={})
    [error] = loaded.errors
    assert "the datasets folder cannot be looked at (File name too long)" in str(error)


# -- the DAG a config gives (Airflow's objects, no database) -------------------------------------------


def test_a_config_gives_its_dag_params_asset_and_spark_settings(tmp_path) -> None:
    from spark_webdataset.airflow.dags import SparkJobOperator, build_dags

    write_config(
        tmp_path, "images", source="gs://raw/{ds}/*.parquet", root="gs://b/images", key="image_id",
        fields={"jpg": "bytes", "cls": "label"}, max_shard_bytes="3GiB", max_samples_per_shard=5000, order="key",
        schedule="0 3 * * *", start_date="2026-10-01", catchup=True, retries=4, owner="ml-data", tags=["images"],
        spark={"conn_id": "spark_prod", "conf": {"spark.executor.memory": "8g"}, "py_files": "/opt/p.zip"},
        validation={"required_fields": ["jpg"]}, build={"parent": "LATEST"},
    )  # fmt: skip
    built = build_dags(tmp_path, doc_md="the DAG file's docstring")
    assert built.errors == [] and list(built.dags) == ["webdataset__images"]
    dag = built.dags["webdataset__images"]
    params = {name: param.value for name, param in dag.params.items()}
    assert params == {
        "source": "gs://raw/{ds}/*.parquet", "source_table": None, "source_format": "parquet",
        "key": "image_id", "fields": ["jpg=bytes", "cls=label"],
        "max_shard_bytes": "3GiB", "max_samples_per_shard": 5000, "order": "key", "version": None,
        "parent": "LATEST", "change": "append",
    }  # fmt: skip
    # no root in the form: the config alone says where the dataset lives; the version override names its rule
    assert "output_root" not in dag.params
    assert dag.params.get_param("version").description.endswith("[A-Za-z0-9][A-Za-z0-9._-]{0,127}, and no '..'")
    described = {name: dag.params.get_param(name).description for name in ("source", "source_format", "key")}
    assert described == {
        "source": "Spark source URI; {ds}, {ds_nodash}, {version} are filled in",
        "source_format": "any Spark format", "key": "column or SQL for each sample's key",
    }  # fmt: skip
    # from the config's schema, not a second copy: the form says what the YAML field means
    assert described == {name: DatasetConfig.model_fields[name].description for name in described}
    assert dag.timetable.expression == "0 3 * * *" and dag.catchup is True
    assert dag.start_date == datetime.datetime(2026, 10, 1, tzinfo=datetime.timezone.utc)
    assert dag.tags == {"webdataset", "spark", "images"} and dag.max_active_runs == 1
    assert {t.task_id: (t.retries, t.owner) for t in dag.tasks} == {
        name: (4, "ml-data") for name in ("plan", "write_shards", "validate", "publish")
    }
    hours = datetime.timedelta(hours=1)  # the config gives none: the defaults
    assert {t.task_id: t.execution_timeout for t in dag.tasks} == {
        "plan": hours / 6, "write_shards": 6 * hours, "validate": 3 * hours, "publish": hours / 2,
    }  # fmt: skip
    write_shards = dag.get_task("write_shards")
    assert isinstance(write_shards, SparkJobOperator)
    assert (write_shards._conn_id, write_shards.conf, write_shards.py_files) == (
        "spark_prod",
        {"spark.executor.memory": "8g"},
        "/opt/p.zip",
    )
    [outlet] = dag.get_task("publish").outlets
    assert (
        (outlet.name, outlet.uri)
        == ("webdataset_images", "gs://b/images")
        == (built.assets["images"].name, built.assets["images"].uri)
    )
    assert dag.doc_md.startswith("### webdataset__images\n") and str(tmp_path / "images.yaml") in dag.doc_md
    assert dag.doc_md.endswith("the DAG file's docstring")


@pytest.mark.parametrize("schedule", ["61 * * * *", "@dayly"])
def test_a_schedule_airflow_refuses_names_the_file_and_the_field(tmp_path, schedule) -> None:
    from spark_webdataset.airflow.dags import build_dags

    write_config(tmp_path, "good", **MINIMAL)
    bad = write_config(tmp_path, "bad", **{**MINIMAL, "root": "/out/bad", "schedule": schedule})
    built = build_dags(tmp_path)
    assert list(built.dags) == ["webdataset__good"]
    [error] = built.errors
    assert str(error).startswith(f"{bad}: field 'schedule': {schedule!r} is not a cron expression or preset: ")


def test_the_cli_checks_a_folder_of_configs(tmp_path, capsys) -> None:
    import json

    from spark_webdataset.cli import main

    write_config(tmp_path, "good", **MINIMAL)
    assert main(["datasets", "--folder", str(tmp_path)]) == 0
    assert (
        capsys.readouterr().out
        == f"webdataset__good  {tmp_path / 'good.yaml'}: /raw/{{ds}} -> /out/ds (schedule None)\n"
    )
    bad = write_config(tmp_path, "bad", **{**MINIMAL, "root": "/out/bad", "order": "random"})
    assert main(["datasets", "--folder", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "webdataset__good" in captured.out
    assert f"{bad}: field 'order': order='random' is not one of hash, key, source" in captured.err
    assert main(["datasets", "good", "--folder", str(tmp_path), "--json"]) == 0  # the good one, for scripts
    assert json.loads(capsys.readouterr().out)["root"] == "/out/ds"
    assert main(["datasets", "--folder", str(tmp_path), "--json"]) == 2  # every usable one, and the bad one named
    captured = capsys.readouterr()
    assert [c["dag_id"] for c in json.loads(captured.out)] == ["webdataset__good"] and f"{bad}: " in captured.err
    assert main(["datasets", "bad", "--folder", str(tmp_path)]) == 2
    assert "no usable dataset named 'bad'" in capsys.readouterr().err
