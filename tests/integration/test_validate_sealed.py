"""Sealed means sealed through the Spark check too (jobs/validate_spark.py, `validate --spark-master`):
validation of a published version by a Spark job writes nothing under it and counts every error.
The local-pool, CLI and Airflow cases: tests/unit/dataset/test_validate_sealed.py."""

from __future__ import annotations

import json
from pathlib import Path

from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.jobs.validate_spark import spark_check
from tests.support.chains import build_chain, commit_version


def _files(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_a_spark_validation_of_a_published_version_writes_nothing_under_it(spark, tmp_path) -> None:
    root = str(tmp_path / "data")
    build_chain(root, ["v1"], per_version=40)
    v1 = Dataset(root).version("v1")
    before = _files(Path(v1.uri))
    master = spark.sparkContext.master
    elsewhere = tmp_path / "v1.json"
    report = validate_version(v1.uri, require=["jpg"], check=spark_check(master), report_path=str(elsewhere))
    assert not report.ok and report.error_count == 40 and report.sealed
    assert _files(Path(v1.uri)) == before
    assert json.loads(elsewhere.read_text())["error_count"] == 40
    commit_version(root, "v2", 40, 10, parent="v1")  # the child still stands on the sealed report
    assert validate_version(Dataset(root).version("v2").uri, check=spark_check(master)).ok
