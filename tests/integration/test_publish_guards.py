"""A write into a published version is refused before any task runs (Spark).
Publish's other guards: tests/unit/dataset/test_publish_guards.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.errors import VersionSealed
from tests.support.fenced_committer import published


def test_a_write_into_a_published_version_is_refused_before_any_task_runs(spark, tmp_path) -> None:
    from pyspark.sql.functions import lit, udf

    root = str(tmp_path / "ds")
    published(root, "v1")
    version = Dataset(root).version("v1")
    before = sorted(p.relative_to(version.uri) for p in Path(version.uri).rglob("*"))
    ran = tmp_path / "tasks-ran"

    @udf("string")
    def key(number: int) -> str:
        ran.mkdir(exist_ok=True)  # a task ran: it would have staged bytes
        return f"new-{number}"

    frame = spark.range(4).select(key("id").alias("__key__"), lit("text").alias("txt"))
    with pytest.raises(Exception) as caught:
        frame.write.format("webdataset").mode("append").save(version.uri)
    assert "VersionSealed" in str(caught.value) or isinstance(caught.value, VersionSealed)
    assert not ran.exists()
    assert sorted(p.relative_to(version.uri) for p in Path(version.uri).rglob("*")) == before
