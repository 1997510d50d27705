"""`pip install` of the wheel is enough: a dataset DAG runs end to end with no checkout anywhere in sight.

The wheel is built from a copy of the sources and installed (--no-deps) into a fresh venv. That venv
sees the project's third-party packages (pyspark, Airflow, ...) through one plain path line in a .pth
file naming .venv's site-packages: a plain line does not execute the .pth files inside it, so the
editable install's path to plugins/ never applies and spark_webdataset can only come from the wheel.
The user's side is one copied DAG file (dags/webdataset_datasets.py) in a DAGs folder and one YAML in
`datasets/` beside it; Airflow runs from a working directory outside the repository, with its own home
and an empty plugins folder. The run (Airflow's own `dags test`, a real spark-submit of the packaged
entry script) publishes a version that wids reads.

It also carries what the checkout's DAG run test used to check (Params reach the writer, key order,
wids reads the index, the Asset event): one spark-submit for both.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from spark_webdataset.dataset.publish import read_latest
from tests.support import REPO

NAME = "wheel_digits"  # an Asset name no other test uses: two roots under one name make Airflow drop events
DAG_ID = f"webdataset__{NAME}"
VERSION = "20261114T063000Z"


def build_wheel(tmp_path: Path) -> Path:
    """The wheel, built from a copy of what the sdist holds (the tree stays free of build/ and egg-info)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "plugins", source / "plugins", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path / "dist"
    command = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(source)]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    (wheel,) = out.glob("spark_webdataset-*.whl")
    return wheel


def fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    """A new venv holding the wheel, then a .pth line to .venv's site-packages for the dependencies
    (a folder of links to it without this project's editable install, whose metadata would otherwise
    be a second spark-webdataset with the same entry points); its python."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # before the .pth exists, so pip sees no spark-webdataset already installed (it would skip the wheel)
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    dependencies = tmp_path / "dependencies"
    dependencies.mkdir()
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        for entry in Path(site).iterdir():
            if (
                not entry.name.startswith(("spark_webdataset", "__editable__"))
                and not (dependencies / entry.name).exists()
            ):
                (dependencies / entry.name).symlink_to(entry)
    (Path(purelib) / "project_dependencies.pth").write_text(f"{dependencies}\n")
    return python


def clean_environment(python: Path, home: Path, dags: Path) -> dict[str, str]:
    """This process's environment without the repository's settings, plus a fresh Airflow home and DAGs folder."""
    kept = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "SPARK_WEBDATASET", "PYSPARK", "PYTHON", "COV_CORE", "COVERAGE"))
    }
    plugins = home / "plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    return {
        **kept,
        "PATH": f"{python.parent}{os.pathsep}{kept['PATH']}",  # spark-submit still from .venv/bin, after this python
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins),  # empty: Airflow puts it on sys.path
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
        "PYSPARK_PYTHON": str(python),
        "PYSPARK_DRIVER_PYTHON": str(python),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


def run_python(python: Path, args: list[str], env: dict[str, str], cwd: Path) -> str:
    """`python *args` in the fresh venv; its stdout."""
    done = subprocess.run([str(python), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow
def test_the_wheel_alone_runs_a_dataset_dag_to_a_published_version(airflow_db, digits_source, tmp_path) -> None:
    import wids

    from spark_webdataset.airflow.consumer import read_published

    wheel = build_wheel(tmp_path)
    packaged = set(zipfile.ZipFile(wheel).namelist())
    assert "spark_webdataset/jobs/entry/build_webdataset.py" in packaged
    assert not any(name.startswith(("jobs/", "dags/", "datasets/", "tests/")) for name in packaged)
    python = fresh_venv(tmp_path, wheel)

    deployment = tmp_path / "deployment"  # what a user has: a DAGs folder with one copied file, a datasets folder
    dags = deployment / "dags"
    dags.mkdir(parents=True)
    shutil.copy2(REPO / "dags" / "webdataset_datasets.py", dags)
    (deployment / "datasets").mkdir()
    (deployment / "datasets" / f"{NAME}.yaml").write_text(
        f"source: {digits_source}\n"
        f"root: ${{SPARK_WEBDATASET_DATA}}/datasets/{NAME}\n"  # data/ beside the DAGs folder by default
        "key: format_string('%05d', id)\n"
        "fields: {png: image, cls: label, json: meta}\n"
        "validation: {required_fields: [png, cls]}\n"
    )
    home = tmp_path / "airflow_home"
    home.mkdir()
    shutil.copyfile(Path(airflow_db) / "airflow.db", home / "airflow.db")  # migrated already
    env = clean_environment(python, home, dags)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    where = json.loads(run_python(python, ["-c", (
        "import json, sys, spark_webdataset; from spark_webdataset.jobs.entry import script, BUILD_WEBDATASET; "
        "from airflow import plugins_manager; plugins, errors = plugins_manager._get_plugins(); "
        "print(json.dumps({'package': spark_webdataset.__file__, 'entry': script(BUILD_WEBDATASET), 'path': sys.path, "
        "'plugins': [(p.name, str(p.source.dist)) for p in plugins], 'errors': errors}))"
    )], env, elsewhere))  # fmt: skip
    venv = python.parent.parent
    assert Path(where["package"]).is_relative_to(venv), where
    assert Path(where["entry"]).is_relative_to(venv) and Path(where["entry"]).is_file(), where
    assert not any(Path(p).is_relative_to(REPO / "plugins") for p in where["path"] if p), where["path"]
    # the WebDataset view comes with the wheel (its entry point), the plugins folder being empty
    assert (where["plugins"], where["errors"]) == ([["webdataset_view", "spark-webdataset"]], {}), where
    # the zip for executors without the package, from the installed files: the checkout's zip, byte for byte
    installed_zip = run_python(python, ["-m", "spark_webdataset.jobs.entry", "--pyfiles", "p.zip"], env, elsewhere)
    checkout_zip = subprocess.run(
        [str(REPO / "scripts" / "build_pyfiles.sh"), str(tmp_path / "checkout.zip")],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    assert (elsewhere / installed_zip).read_bytes() == Path(checkout_zip).read_bytes()

    # Params override the config for this run: they must reach the writer through the packaged job
    params = {
        "max_shard_bytes": "256KiB", "max_samples_per_shard": 40, "order": "key",
        "key": "format_string('d%05d', id)", "fields": ["png=image", "cls=label"],
    }  # fmt: skip
    logical_date = "2026-11-14T06:30:00+00:00"
    command = [str(python), "-m", "airflow", "dags", "test", DAG_ID, logical_date, "-c", json.dumps(params)]
    done = subprocess.run(command, env=env, cwd=elsewhere, capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert where["entry"] in output, "spark-submit did not run the installed package's entry script"

    database = sqlite3.connect(home / "airflow.db")
    (state,) = database.execute("SELECT state FROM dag_run WHERE dag_id = ?", (DAG_ID,)).fetchone()
    assert state == "success", output[-5000:]

    root = deployment / "data" / "datasets" / NAME
    assert read_latest(str(root)) == VERSION
    directory = root / "versions" / VERSION
    document = json.loads((directory / "_manifest.json").read_text())
    assert document["options"]["maxShardBytes"] == 256 * 1024
    assert document["options"]["maxSamplesPerShard"] == 40
    assert [field["name"] for field in document["fields"]] == ["png", "cls"]
    shards = document["shards"]
    # 256KiB alone would allow 85 samples of 3 KiB a shard: 40 is what holds them
    assert all(s["samples"] <= 40 and s["bytes"] <= 256 * 1024 for s in shards), shards
    for shard in shards:
        assert (directory / shard["name"]).stat().st_size == shard["bytes"]
    # order=key: key ranges ascend shard by shard; key: the SQL given
    ranges = [(s["first_key"], s["last_key"]) for s in shards]
    assert all(first <= last for first, last in ranges)
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:])), ranges
    assert ranges[0][0] == "d00000" and ranges[-1][1] == "d01796"
    assert json.loads((directory / "_validation.json").read_text())["ok"]

    index = directory / "shardindex.json"
    dataset = wids.ShardListDataset(str(index), transformations=[], cache_dir=str(tmp_path / "cache"))
    source_rows = sum(pq.read_metadata(p).num_rows for p in Path(digits_source).glob("*.parquet"))
    assert len(dataset) == source_rows == 1797
    sample = dataset[len(dataset) - 1]
    assert sample["__key__"] == "d01796" and sample[".png"].read().startswith(b"\x89PNG")

    # what the publish task told Airflow: the Asset event, as downstream DAGs get it
    events = database.execute(
        "SELECT asset.name, asset_event.source_task_id, asset_event.extra FROM asset_event "
        "JOIN asset ON asset.id = asset_event.asset_id WHERE asset_event.source_dag_id = ?",
        (DAG_ID,),
    ).fetchall()
    database.close()
    assert [(name, task, json.loads(extra)) for name, task, extra in events] == [
        (
            f"webdataset_{NAME}",
            "publish",
            {
                "version": VERSION,
                "root": str(root),
                "uri": str(directory),
                "index": str(index),
                "samples": 1797,
                "shards": len(shards),
                "bytes": sum(s["bytes"] for s in shards),
                # the cost: a whole version (no parent) stores all its bytes; gc (keep_last 1) frees nothing
                "parent": None,
                "bytes_stored": sum(s["bytes"] for s in shards),
                "bytes_referenced": 0,
                "gc_would_free": 0,
            },
        )
    ]
    # what the example consumer DAG does with that event
    assert read_published(json.loads(events[0][2])) == {"version": VERSION, "samples": 1797}
