"""The WebDataset view's previews on an s3:// root (the S3 server, moto), through the same storage layer.
The view on local roots: tests/unit/airflow/test_webdataset_view.py; on gs://: tests/integration/test_webdataset_view.py.
"""

from __future__ import annotations

import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from spark_webdataset.airflow.ui import preview as previews
from spark_webdataset.airflow.ui.app import create_app
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.storage import storage_for
from spark_webdataset.storage.s3 import S3Storage
from tests.support.webdataset_ui_data import commit_table, digits_table, write_digits_config

VERSION = "20261201T000000Z"
SAMPLES = 600
SHARD_BYTES = 1024 * 1024  # shards well above a preview's FETCH_BYTES, so what a request fetches shows


@pytest.fixture
def s3_view(s3_bucket, tmp_path, monkeypatch) -> dict:
    """A digits version committed, validated and published on s3://<bucket>/digits; the view's app on
    its config; every ranged GET of a shard recorded (the real request still made)."""
    root = f"{s3_bucket}/digits"
    table = digits_table().slice(0, SAMPLES)
    local = commit_table(tmp_path / "local", VERSION, table, max_shard_bytes=SHARD_BYTES)
    storage = storage_for(root)
    target = Dataset(root).version(VERSION)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        with storage.open_write(target.path(str(path.relative_to(local)))) as out:
            out.write(path.read_bytes())
    assert validate_version(target.uri, workers=1).ok
    publish(root, VERSION)
    write_digits_config(tmp_path / "datasets", "remote", root)
    app = create_app(tmp_path / "datasets")
    app.dependency_overrides[app.state.user_dependency] = lambda: "tester"
    fetched: list[tuple[str, int]] = []
    real = S3Storage.read_range

    def recorded(self, path: str, offset: int, length: int) -> bytes:
        fetched.append((path.rsplit("/", 1)[-1], length))
        return real(self, path, offset, length)

    monkeypatch.setattr(S3Storage, "read_range", recorded)
    sizes = {name: size for name, size in storage.list_sizes(target.uri).items() if name.endswith(".tar")}
    labels = table.column("label").to_pylist()
    return {"root": root, "client": TestClient(app), "fetched": fetched, "sizes": sizes, "labels": labels}


def test_an_s3_root_is_listed_and_previewed_through_the_storage_layer(s3_view) -> None:
    client, labels = s3_view["client"], s3_view["labels"]
    row = client.get("/api/datasets").json()["datasets"][0]
    assert (row["root"], row["latest"], row["error"]) == (s3_view["root"], VERSION, None)
    body = client.get("/api/datasets/remote/versions/LATEST/preview?n=16").json()
    assert body["count"] == 16 and [s["key"] for s in body["samples"]] == [f"{i:05d}" for i in range(16)]
    assert all(s["fields"][0]["kind"] == "image" for s in body["samples"])
    assert all(s["label"] == str(labels[int(s["key"])]) for s in body["samples"])
    page = client.get("/datasets/remote/versions/LATEST?n=4")
    assert page.status_code == 200 and page.text.count('src="data:image/png;base64,') == 4


def test_an_s3_preview_fetches_near_what_it_reads(s3_view) -> None:
    """A first-samples preview asks for FETCH_BYTES a ranged GET, not the storage layer's 8 MiB part
    (which, on a shard of 1 MiB, is the whole shard)."""
    assert min(s3_view["sizes"].values()) > 2 * previews.FETCH_BYTES or len(s3_view["sizes"]) == 1
    body = s3_view["client"].get("/api/datasets/remote/versions/LATEST/preview?n=4").json()
    assert body["count"] == 4
    shard_gets = [length for name, length in s3_view["fetched"] if name.endswith(".tar")]
    assert shard_gets and max(shard_gets) <= previews.FETCH_BYTES, shard_gets


def test_s3_random_samples_a_key_and_one_shard(s3_view) -> None:
    """Random samples and a key through the sample index (one ranged read a sample), one shard by seeking."""
    client, labels, fetched = s3_view["client"], s3_view["labels"], s3_view["fetched"]
    url = "/api/datasets/remote/versions/LATEST/preview?n=8&mode=random&seed="
    first, again = (client.get(url + "7").json() for _ in range(2))
    assert first["indexed"] is True and first["count"] == 8
    assert [s["key"] for s in first["samples"]] == [s["key"] for s in again["samples"]]
    assert all(s["label"] == str(labels[int(s["key"])]) for s in first["samples"])
    fetched.clear()
    one = client.get("/api/datasets/remote/versions/LATEST/preview?mode=key&key=00042").json()
    assert [s["key"] for s in one["samples"]] == ["00042"] and one["samples"][0]["label"] == str(labels[42])
    assert [name for name, _ in fetched if name.endswith(".tar")] == [one["samples"][0]["shard"]]
    shard = max(s3_view["sizes"])
    part = client.get(f"/api/datasets/remote/versions/LATEST/preview?n=4&shard={shard}").json()
    assert part["count"] == 4 and {s["shard"] for s in part["samples"]} == {shard}
    seeded = client.get(f"/api/datasets/remote/versions/LATEST/preview?n=4&mode=random&seed=3&shard={shard}").json()
    assert seeded["count"] >= 1 and {s["shard"] for s in seeded["samples"]} == {shard}
