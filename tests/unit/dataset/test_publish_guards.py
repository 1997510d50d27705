"""Publish's guards: an empty version is refused unless asked for, LATEST moves by
compare-and-swap (two publishers interleaved at the exact point, no timing), LATEST can be set
back by hand to undo a mistake (recorded). A write into a published version refused before any
task runs: tests/integration/test_publish_guards.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_webdataset import cli
from spark_webdataset import fault_points as faults
from spark_webdataset.dataset.commit import StreamBatch
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import advance_latest, publish
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import PublishRefused
from spark_webdataset.format.manifest import Manifest
from tests.support.fenced_committer import commit_samples, published


def test_an_empty_version_is_refused_unless_allowed(tmp_path, capsys) -> None:
    root = str(tmp_path / "ds")
    version = Dataset(root).version("empty")
    commit_samples(version.uri, "x", 0)
    assert version.read_manifest().samples == 0 and validate_version(version.uri).ok
    with pytest.raises(PublishRefused, match="no samples"):
        publish(root, "empty")
    assert not version.is_published() and not version.is_sealed() and Dataset(root).read_latest() is None
    assert cli.main(["publish", root, "empty"]) == 1
    assert "--allow-empty" in capsys.readouterr().err
    assert cli.main(["publish", root, "empty", "--allow-empty"]) == 0
    assert Dataset(root).read_latest() == "empty"


def test_latest_moves_by_compare_and_swap_when_two_publishers_interleave(tmp_path) -> None:
    """Publisher 1 decides to move LATEST to 20261101; before its swap, publisher 2 moves it to
    the newer 20261102. Publisher 1's swap must fail, and it must not move LATEST back."""
    root = str(tmp_path / "ds")
    published(root, "20261101")
    published(root, "20261102")
    Path(Dataset(root).latest_uri).unlink()  # neither is LATEST: both publishers will want to move it
    interleaved = []

    def second_publisher() -> None:
        interleaved.append(advance_latest(root, "20261102"))

    faults.install("latest:deciding", second_publisher)
    try:
        assert advance_latest(root, "20261101") == "20261102"
    finally:
        faults.clear()
    assert interleaved == ["20261102"]  # the second publisher ran exactly between decide and swap
    assert Dataset(root).read_latest() == "20261102"


def test_latest_set_by_hand_undoes_a_mistaken_publish_and_is_recorded(tmp_path, capsys) -> None:
    root = str(tmp_path / "ds")
    published(root, "20261101")
    published(root, "oops", logical_date="2999-01-01")  # holds LATEST forever by its logical date
    published(root, "20261102")
    assert Dataset(root).read_latest() == "oops"
    assert cli.main(["latest", root, "--set", "missing"]) == 1
    assert "not published" in capsys.readouterr().err
    assert cli.main(["latest", root, "--set", "20261102", "--by", "alice"]) == 0
    assert Dataset(root).read_latest() == "20261102"
    changes = json.loads(Path(Dataset(root).latest_changes_uri).read_text())
    assert [(c["latest"], c["previous"], c["by"]) for c in changes] == [("20261102", "oops", "alice")]
    assert changes[0]["at"].endswith("Z")
    published(root, "20261103")  # publishing moves forward from there as usual
    assert Dataset(root).read_latest() == "20261103"


def test_checkpoint_spellings_are_one_stream(tmp_path) -> None:
    location = str(tmp_path / "checkpoint")
    manifest = Manifest(shards=[], fields=[], options={}, run={"streams": {f"file://{location}/": 4}})
    for spelling in (location, f"{location}/", f"file://{location}"):
        assert StreamBatch(spelling, 4).committed_in(manifest)
        assert not StreamBatch(spelling, 5).committed_in(manifest)
