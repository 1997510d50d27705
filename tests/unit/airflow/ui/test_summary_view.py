"""The WebDataset view's app (spark_webdataset.airflow.ui) through FastAPI's TestClient, without Spark.

Versions are written by the real ShardWriter and Manifest, checked by the
real validate_version and published by the real publish (tests/support/webdataset_ui_data.py).
"""

from __future__ import annotations

import base64
import io
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from PIL import Image

from spark_webdataset.airflow.ui import preview as previews
from spark_webdataset.airflow.ui.app import airflow_user, create_app
from spark_webdataset.dataset.paths import check_shard_name
from spark_webdataset.dataset.validate import validate_version
from tests.support.webdataset_ui_data import commit_table, digits_table, published_digits, write_digits_config


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("view")
    table = digits_table()
    root = base / "data" / "digits"
    # an older published version (the first 600 digits), then the full one: LATEST
    published_digits(root, "20261130T000000Z", table.slice(0, 600))
    published_digits(root, "20261201T000000Z", table)
    # written, never validated
    commit_table(root, "20261202T000000Z", table.slice(0, 100))
    # validated and failed: one byte of its second shard flipped
    broken = commit_table(root, "20261203T000000Z", table.slice(0, 300), max_shard_bytes=64 * 1024)
    shard = broken / "shard-000001.tar"
    data = bytearray(shard.read_bytes())
    data[2000] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert not validate_version(str(broken), workers=1).ok
    configs = base / "datasets"
    write_digits_config(configs, "digits", root)
    blocked = base / "a-file"
    blocked.write_text("not a directory")
    write_digits_config(configs, "unreachable", blocked / "dataset")
    (configs / "broken.yaml").write_text("name: [not, a, name]\n")
    app = create_app(configs)
    app.dependency_overrides[app.state.user_dependency] = lambda: "tester"
    return {"client": TestClient(app), "root": root, "labels": table.column("label").to_pylist(), "configs": configs}


def test_the_plugin_loads_by_its_entry_point_with_no_import_error() -> None:
    from airflow import plugins_manager

    plugins, import_errors = plugins_manager._get_plugins()
    assert import_errors == {}
    (plugin,) = [p for p in plugins if p.name == "webdataset_view"]
    (app,) = plugin.fastapi_apps
    assert app["url_prefix"] == "/webdataset" and app["app"].state.user_dependency is airflow_user
    (view,) = plugin.external_views
    assert (view["name"], view["href"], view["nav_top_level"]) == ("WebDataset", "/webdataset/", True)


def test_every_route_requires_a_logged_in_user(world) -> None:
    anonymous = TestClient(create_app(world["configs"]))
    for url in ("/api/datasets", "/api/datasets/digits/versions/LATEST/preview"):
        assert anonymous.get(url).status_code == 401
    page = anonymous.get("/", follow_redirects=False)
    assert page.status_code in (302, 307) and "digits" not in page.text


def test_datasets_lists_each_config_and_an_unreachable_root_is_an_error_on_its_row(world) -> None:
    response = world["client"].get("/api/datasets")
    assert response.status_code == 200
    rows = {row["name"]: row for row in response.json()["datasets"]}
    digits = rows["digits"]
    assert (digits["latest"], digits["versions"], digits["published"], digits["error"]) == (
        "20261201T000000Z",
        4,
        2,
        None,
    )
    assert digits["last_published_at"]
    assert "Not a directory" in rows["unreachable"]["error"]
    assert rows["broken"]["root"] is None and "broken.yaml" in rows["broken"]["error"]
    for url in ("/datasets/unreachable", "/api/datasets/unreachable/versions"):
        failed = world["client"].get(url)
        assert failed.status_code == 502 and "Not a directory" in failed.text
    page = world["client"].get("/")
    assert page.status_code == 200
    assert "20261201T000000Z" in page.text and "Not a directory" in page.text


def test_versions_newest_first_with_their_state_and_paged(world) -> None:
    client = world["client"]
    body = client.get("/api/datasets/digits/versions").json()
    states = [(v["version"], v["state"]) for v in body["versions"]]
    assert states == [
        ("20261203T000000Z", "invalid"),
        ("20261202T000000Z", "committed"),
        ("20261201T000000Z", "latest"),
        ("20261130T000000Z", "published"),
    ]
    latest = body["versions"][2]
    assert (latest["samples"], latest["validated"], latest["logical_date"]) == (1797, True, "2026-12-01T00:00:00Z")
    assert latest["validated_at"] and latest["published_at"] and latest["bytes"] > 0 and latest["shards"] > 1
    second = client.get("/api/datasets/digits/versions?page=2&per_page=3").json()
    assert ([v["version"] for v in second["versions"]], second["pages"], second["total"]) == (
        ["20261130T000000Z"],
        2,
        4,
    )
    assert "invalid" in client.get("/datasets/digits").text


def test_a_version_shows_its_shards_and_publish_record(world) -> None:
    detail = world["client"].get("/api/datasets/digits/versions/LATEST").json()
    assert detail["version"] == "20261201T000000Z" and detail["state"] == "latest"
    assert detail["validation"]["ok"] and detail["publish_record"]["manifest_sha256"]
    first = detail["shards"][0]
    assert first["name"] == "shard-000000.tar" and first["crc32c"] and first["first_key"] <= first["last_key"]
    assert sum(s["samples"] for s in detail["shards"]) == 1797
    index = world["client"].get("/api/datasets/digits/versions/20261201T000000Z/index").json()
    assert index["__kind__"] == "wids-shard-index-v1" and len(index["shardlist"]) == len(detail["shards"])


def test_a_failed_validation_shows_its_first_error(world) -> None:
    detail = world["client"].get("/api/datasets/digits/versions/20261203T000000Z").json()
    assert detail["state"] == "invalid" and not detail["validation"]["ok"]
    first = detail["validation"]["errors"][0]
    assert first["shard"] == "shard-000001.tar" and first["error"]
    page = world["client"].get("/datasets/digits/versions/20261203T000000Z")
    assert page.status_code == 200 and ">invalid<" in page.text and "shard-000001.tar" in page.text


def test_the_digits_preview_returns_16_png_images_and_their_labels(world) -> None:
    response = world["client"].get("/api/datasets/digits/versions/LATEST/preview?n=16")
    assert response.status_code == 200
    body = response.json()
    assert (body["count"], body["stopped"]) == (16, "count")
    assert body["bytes_read"] < 1024 * 1024
    for sample in body["samples"]:
        image = next(f for f in sample["fields"] if f["field"] == "png")
        assert image["kind"] == "image" and image["data_url"].startswith("data:image/png;base64,")
        png = Image.open(io.BytesIO(base64.b64decode(image["data_url"].split(",", 1)[1])))
        assert png.size == (32, 32)
        assert sample["label"] == str(world["labels"][int(sample["key"])])
        meta = next(f for f in sample["fields"] if f["field"] == "json")
        assert meta["kind"] == "json" and f'"label": {sample["label"]}' in meta["text"]
    page = world["client"].get("/datasets/digits/versions/LATEST")
    assert page.text.count('src="data:image/png;base64,') == 16


def test_random_preview_is_seeded_and_one_shard_can_be_previewed(world) -> None:
    client = world["client"]
    url = "/api/datasets/digits/versions/LATEST/preview?n=8&mode=random&seed="
    first, again, other = (client.get(url + seed).json() for seed in ("7", "7", "8"))
    keys = [s["key"] for s in first["samples"]]
    assert len(keys) >= 6 and keys == [s["key"] for s in again["samples"]]
    assert keys != [s["key"] for s in other["samples"]]
    for sample in first["samples"]:
        assert sample["label"] == str(world["labels"][int(sample["key"])])
    one = client.get("/api/datasets/digits/versions/LATEST/preview?n=4&shard=shard-000001.tar").json()
    assert {s["shard"] for s in one["samples"]} == {"shard-000001.tar"} and one["count"] == 4
    page = client.get("/datasets/digits/versions/LATEST?n=8&mode=random&seed=7")
    assert page.status_code == 200 and "seed 7" in page.text
    assert all(f'data-key="{key}"' in page.text for key in keys)
    page = client.get("/datasets/digits/versions/LATEST?n=4&shard=shard-000001.tar")
    assert page.text.count('src="data:image/png;base64,') == 4 and "Samples of shard-000001.tar" in page.text


def test_random_samples_and_a_key_are_read_by_the_sample_index(world, monkeypatch) -> None:
    """N random samples cost N ranged reads of the samples' own bytes (and the index's footer and
    blocks), never a seek through a shard; a key is one lookup and one read."""
    from spark_webdataset.storage.local import LocalStorage

    reads: list[tuple[str, int]] = []
    real = LocalStorage.read_range

    def counted(self, path: str, offset: int, length: int) -> bytes:
        reads.append((path.rsplit("/", 1)[-1], length))
        return real(self, path, offset, length)

    monkeypatch.setattr(LocalStorage, "read_range", counted)
    client = world["client"]
    body = client.get("/api/datasets/digits/versions/LATEST/preview?n=8&mode=random&seed=7").json()
    assert body["indexed"] is True and body["count"] == 8
    shard_reads = [length for name, length in reads if name.endswith(".tar")]
    assert len(shard_reads) == 8 and body["bytes_read"] == sum(shard_reads)
    for sample in body["samples"]:
        assert sample["label"] == str(world["labels"][int(sample["key"])])
    reads.clear()
    one = client.get("/api/datasets/digits/versions/LATEST/preview?mode=key&key=00042").json()
    assert [s["key"] for s in one["samples"]] == ["00042"] and one["samples"][0]["label"] == str(world["labels"][42])
    assert [name for name, _ in reads if name.endswith(".tar")] == [one["samples"][0]["shard"]]
    missing = client.get("/api/datasets/digits/versions/LATEST/preview?mode=key&key=99999").json()
    assert missing["count"] == 0 and "no sample with key '99999'" in missing["errors"][0]["error"]
    page = client.get("/datasets/digits/versions/LATEST?mode=key&key=00042")
    assert page.status_code == 200 and 'data-key="00042"' in page.text and "by the sample index" in page.text
    assert client.get("/api/datasets/digits/versions/LATEST/preview?mode=key").status_code == 400


def test_a_preview_stops_at_its_byte_budget(world) -> None:
    from spark_webdataset.airflow.ui.summary import resolve_version, shard_entries

    version = resolve_version(str(world["root"]), "LATEST")
    result = previews.first_samples(version, shard_entries(version), 64, budget=20_000)
    assert result.stopped == "budget" and 0 < len(result.samples) < 64 and result.bytes_read <= 20_000


def test_a_version_page_reads_the_manifest_and_latest_once(world, monkeypatch) -> None:
    from spark_webdataset.dataset.layout import Dataset, Version

    reads = {"manifest": 0, "latest": 0}
    manifest, latest = Version.read_manifest_bytes, Dataset.read_latest

    def count(what, real):
        def counted(self):
            reads[what] += 1
            return real(self)

        return counted

    monkeypatch.setattr(Version, "read_manifest_bytes", count("manifest", manifest))
    monkeypatch.setattr(Dataset, "read_latest", count("latest", latest))
    page = world["client"].get("/datasets/digits/versions/LATEST?n=4&shard=shard-000001.tar")
    assert page.status_code == 200 and page.text.count('src="data:image/png;base64,') == 4
    assert reads == {"manifest": 1, "latest": 1}


def test_a_shard_that_cannot_be_read_is_an_error_row_and_the_next_shard_follows(world) -> None:
    from spark_webdataset.airflow.ui.summary import resolve_version, shard_entries

    version = resolve_version(str(world["root"]), "LATEST")
    shards = [("shard-999999.tar", 1024)] + shard_entries(version)
    first = previews.first_samples(version, shards, 4)
    assert len(first.samples) == 4 and first.stopped == "count"
    assert [e["shard"] for e in first.errors] == ["shard-999999.tar"]
    assert first.samples[0]["shard"] == "shard-000000.tar"
    missing = previews.random_samples(version, [("shard-999999.tar", 1024)], 2, seed=1)
    assert (missing.samples, missing.stopped) == ([], "end") and missing.errors


@pytest.mark.parametrize(
    "url, statuses",
    [
        ("/api/datasets/digits/versions/..%2F..%2Fetc", (400, 404)),
        ("/api/datasets/digits/versions/a..b", (400,)),
        ("/api/datasets/digits/versions/gs:%2F%2Fother%2Fx", (400, 404)),
        ("/api/datasets/digits/versions/.hidden/preview", (400,)),
        ("/api/datasets/digits/versions/LATEST/preview?shard=../../x.tar", (400,)),
        ("/api/datasets/digits/versions/LATEST/preview?shard=%2Fetc%2Fpasswd", (400,)),
        ("/api/datasets/digits/versions/LATEST/preview?shard=gs://bucket/x.tar", (400,)),
        ("/api/datasets/digits/versions/LATEST/preview?shard=_manifest.json", (400,)),
        ("/api/datasets/digits/versions/LATEST/preview?shard=shard-999999.tar", (404,)),
        ("/api/datasets/..%2Fdigits", (404,)),
        ("/api/datasets/%2Ftmp", (404,)),
        ("/api/datasets/nope/versions", (404,)),
        ("/api/datasets/digits/versions/20991231T000000Z", (404,)),
        ("/datasets/digits/versions/a..b", (400,)),
    ],
)
def test_no_url_leaves_the_configured_roots(world, url, statuses) -> None:
    assert world["client"].get(url).status_code in statuses


def test_shard_names_are_plain_tar_file_names() -> None:
    assert check_shard_name("shard-000001.tar") == "shard-000001.tar"
    for bad in ("../x.tar", "a/b.tar", "gs://b/x.tar", "..tar", ".x.tar", "x.tar/", "x", None):
        with pytest.raises(ValueError):
            check_shard_name(bad)
