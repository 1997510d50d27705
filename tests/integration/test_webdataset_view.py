"""The WebDataset view's app on a gs:// root (the emulator), through the same storage layer.
The view on local roots: tests/unit/airflow/ui/test_summary_view.py.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from spark_webdataset.airflow.ui import preview as previews
from spark_webdataset.airflow.ui.app import create_app
from tests.support.webdataset_ui_data import digits_table, published_digits, write_digits_config


def test_a_gs_root_reads_through_the_same_storage_layer(bucket, tmp_path) -> None:
    from spark_webdataset.storage import storage_for

    local = tmp_path / "digits"
    published_digits(local, "20261201T000000Z", digits_table().slice(0, 200))
    storage = storage_for(bucket)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        storage.write_atomic(f"{bucket}/digits/{path.relative_to(local)}", path.read_bytes())
    write_digits_config(tmp_path / "datasets", "remote", f"{bucket}/digits")
    app = create_app(tmp_path / "datasets")
    app.dependency_overrides[app.state.user_dependency] = lambda: "tester"
    client = TestClient(app)
    row = client.get("/api/datasets").json()["datasets"][0]
    assert (row["root"], row["latest"], row["error"]) == (f"{bucket}/digits", "20261201T000000Z", None)
    body = client.get("/api/datasets/remote/versions/LATEST/preview?n=16").json()
    assert body["count"] == 16 and all(s["fields"][0]["kind"] == "image" for s in body["samples"])
    # a gs:// shard is read with ranged GETs of 256 KiB, not the storage layer's 8 MiB
    from spark_webdataset.dataset.layout import Dataset

    version = Dataset(f"{bucket}/digits").version("20261201T000000Z")
    with previews._open_shard(version, "shard-000000.tar") as stream:
        assert stream._chunk_size == previews.FETCH_BYTES
