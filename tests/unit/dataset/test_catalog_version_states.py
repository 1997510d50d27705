"""One vocabulary of version states (issue 20): `inspect --json` and the view describe one root alike.

The root holds a version in every state of `dataset.catalog.VersionState`, written without Spark
(tests/support/webdataset_ui_data.py: the real ShardWriter, Manifest, validate_version and publish).
"""

from __future__ import annotations

import json
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from spark_webdataset.airflow.ui import summary
from spark_webdataset.airflow.ui.app import create_app
from spark_webdataset.cli import main as cli
from spark_webdataset.dataset.catalog import VersionState, describe_root
from spark_webdataset.dataset.publish import SEAL
from spark_webdataset.dataset.tree import (
    COMMIT_JOURNAL_NAME,
    RETIRED_NAME,
    SEAL_NAME,
    WRITER_MARK,
    WRITER_MARK_NAME,
)
from spark_webdataset.dataset.validate import validate_version
from tests.support.webdataset_ui_data import commit_table, digits_table, published_digits, write_digits_config

# version id -> the state it is in
EXPECTED = {
    "20261101T000000Z": "published",
    "20261102T000000Z": "latest",
    "20261103T000000Z": "sealed",
    "20261104T000000Z": "valid",
    "20261105T000000Z": "invalid",
    "20261106T000000Z": "committed",  # never validated
    "20261107T000000Z": "committed",  # validated, then its manifest changed
    "20261108T000000Z": "committed",  # committed, an append's journal pending
    "20261109T000000Z": "retired",  # gc retired it: its record went, shards a kept child references stay
    "staging": "not committed",  # our writer's mark, no manifest
    "journal": "not committed",  # a first commit's journal, no manifest
    "foreign": "foreign",
    "empty": "empty",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("states")
    root = base / "data" / "every-state"
    table = digits_table().slice(0, 40)
    published_digits(root, "20261101T000000Z", table.slice(0, 20))
    published_digits(root, "20261102T000000Z", table)
    sealed = commit_table(root, "20261103T000000Z", table)
    assert validate_version(str(sealed), workers=1).ok
    (sealed / SEAL_NAME).write_bytes(SEAL)  # a publish that died between its seal and its record
    assert validate_version(str(commit_table(root, "20261104T000000Z", table)), workers=1).ok
    broken = commit_table(root, "20261105T000000Z", table)
    shard = broken / "shard-000000.tar"
    shard.write_bytes(shard.read_bytes()[:-1024])
    assert not validate_version(str(broken), workers=1).ok
    commit_table(root, "20261106T000000Z", table)
    stale = commit_table(root, "20261107T000000Z", table)
    assert validate_version(str(stale), workers=1).ok
    manifest = stale / "_manifest.json"
    manifest.write_text(manifest.read_text().replace('"maxShardBytes"', '"maxShardBytes" ', 1))
    pending = commit_table(root, "20261108T000000Z", table)
    (pending / COMMIT_JOURNAL_NAME).write_text("{}")
    retired = commit_table(root, "20261109T000000Z", table)
    assert validate_version(str(retired), workers=1).ok
    (retired / SEAL_NAME).write_bytes(SEAL)
    (retired / RETIRED_NAME).write_text('{"__kind__": "spark-webdataset-retired-v1", "version": "20261109T000000Z"}\n')
    for name in ("staging", "journal", "foreign", "empty"):
        (root / "versions" / name).mkdir()
    (root / "versions" / "staging" / WRITER_MARK_NAME).write_bytes(WRITER_MARK)
    (root / "versions" / "journal" / WRITER_MARK_NAME).write_bytes(WRITER_MARK)
    (root / "versions" / "journal" / COMMIT_JOURNAL_NAME).write_text("{}")
    (root / "versions" / "foreign" / "data.tar").write_bytes(bytes(1024))
    configs = base / "datasets"
    write_digits_config(configs, "every-state", root)
    app = create_app(configs)
    app.dependency_overrides[app.state.user_dependency] = lambda: "tester"
    return {"root": root, "client": TestClient(app)}


def test_the_root_holds_a_version_in_every_state(world) -> None:
    states = {v.version: v.state for v in describe_root(str(world["root"])).versions}
    assert {k: str(v) for k, v in states.items()} == EXPECTED
    assert set(states.values()) == set(VersionState)


def test_inspect_json_and_the_view_report_the_same_state_for_each_version(world, capsys) -> None:
    root = str(world["root"])
    assert cli(["inspect", root, "--json"]) == 0
    inspected = json.loads(capsys.readouterr().out)
    by_inspect = {v["version"]: v for v in inspected["versions"]}
    listed = world["client"].get("/api/datasets/every-state/versions?per_page=200").json()
    by_view = {v["version"]: v for v in listed["versions"]}
    assert {v: row["state"] for v, row in by_inspect.items()} == EXPECTED
    assert {v: row["state"] for v, row in by_view.items()} == EXPECTED
    for version in EXPECTED:  # the version page: the same state, and the same facts
        detail = world["client"].get(f"/api/datasets/every-state/versions/{version}").json()
        assert detail["state"] == EXPECTED[version], version
        for fact in ("published", "sealed", "commit_pending", "logical_date", "published_at", "validated"):
            assert by_inspect[version][fact] == by_view[version][fact] == detail[fact], (version, fact)
        for fact in ("samples", "shards", "bytes"):
            assert by_inspect[version][fact] == by_view[version][fact], (version, fact)
    assert inspected["latest"] == listed["latest"] == "20261102T000000Z"
    assert [v["version"] for v in inspected["versions"]] == [v["version"] for v in reversed(listed["versions"])]
    assert by_inspect["20261108T000000Z"]["commit_pending"] and not by_inspect["20261106T000000Z"]["commit_pending"]
    assert by_inspect["20261107T000000Z"]["validation_current"] is False


def test_the_view_and_the_text_of_inspect_show_the_state_words(world, capsys) -> None:
    page = world["client"].get("/datasets/every-state").text
    for word in set(EXPECTED.values()):
        assert f">{word}</span>" in page, word
    assert cli(["inspect", str(world["root"])]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    for line in lines:
        version = line[3:].split()[0]
        assert line.rstrip().split("  ")[-1].split(" (")[0].strip() == EXPECTED[version], line
    assert any("validated for another manifest" in line for line in lines)
    assert any("a commit pending" in line for line in lines)


def test_a_version_id_from_a_url_is_checked_before_any_path(world) -> None:
    for bad in ("..", "a..b", ".hidden"):
        with pytest.raises(Exception) as error:
            summary.version_detail(str(world["root"]), bad)
        assert type(error.value).__name__ in ("InvalidVersionId", "NotFound")
