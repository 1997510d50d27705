"""A config's root obeys the path rule every entry point applies: a bad one is that file's error, naming the
field, and the folder's other configs still load. (A relative local root is resolved against the config's
folder first, `../out/ds` included: that is where it points.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_webdataset.airflow.configs import load_folder
from tests.support.dataset_dags import write_config


@pytest.mark.parametrize(
    "root", ["/data/ds/../other", "/data//ds", "gs://b/ds/./x", "gs://b/../ds", "/data/" + "x" * 300]
)
def test_a_root_that_breaks_the_path_rule_is_its_files_error(tmp_path: Path, root: str) -> None:
    fields = dict(source="src", source_format="parquet", key="id", fields={"cls": "label"}, schedule=None)
    write_config(tmp_path, "bad", name="bad", root=root, **fields)
    write_config(tmp_path, "good", name="good", root="data/good", **fields)
    loaded = load_folder(tmp_path, {})
    assert [config.name for config in loaded.configs] == ["good"]
    (error,) = loaded.errors
    assert error.path.name == "bad.yaml" and [name for name, _ in error.problems] == ["root"], error
