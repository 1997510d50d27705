"""Rules of dataset/paths.py that issue 29 added, each where a one-line bug in it went unseen by the rest of
the suite (issue 29's mutation table re-run: the mutation each test catches is named above it). Real
parts on local disk, without Spark; the Spark reader's: tests/integration/test_mutations_more.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import spark_webdataset
from spark_webdataset.dataset.layout import Dataset, Version
from spark_webdataset.dataset.paths import MAX_NAME_BYTES
from spark_webdataset.errors import InputError, InvalidVersionId
from tests.support.fenced_committer import commit_samples, keys

# dataset/paths.py normalize_uri: `if length > MAX_NAME_BYTES` -> `if length >= MAX_NAME_BYTES`


def test_a_path_part_of_exactly_the_longest_name_is_a_place_a_version_is_written_and_read(tmp_path: Path) -> None:
    root = tmp_path / ("r" * MAX_NAME_BYTES)  # NAME_MAX: a name Linux accepts
    uri = Dataset(str(root)).version("v1").uri
    commit_samples(uri, "a", 12)
    assert sorted(spark_webdataset.open(uri).keys()) == keys("a", 12)
    with pytest.raises(InputError, match="path part of 256 bytes"):
        Dataset(str(tmp_path / ("r" * (MAX_NAME_BYTES + 1))))


# dataset/paths.py normalize_place: `if len(parts) >= 2 and parts[-2] == VERSIONS_DIR` -> `len(parts) > 2`


@pytest.mark.parametrize("name", [".hidden", "２０２６", "v1а", "-v"])
def test_a_relative_versions_directory_is_checked_as_a_version_id(tmp_path: Path, monkeypatch, name: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidVersionId, match="version id"):
        Version.at(f"versions/{name}")
    assert list(tmp_path.iterdir()) == []


# dataset/paths.py normalize_uri: `(part == "." and (anchor or position > 0))` -> `(part == "." and anchor)`


@pytest.mark.parametrize("uri", ["ds/./versions/v1", "ds/versions/./v1", "./ds/./versions/v1"])
def test_a_relative_path_with_a_dot_part_past_its_start_is_refused(tmp_path: Path, monkeypatch, uri: str) -> None:
    monkeypatch.chdir(tmp_path)
    for call in (lambda: Version.at(uri), lambda: Dataset(uri)):
        with pytest.raises(InputError, match="'.' path part"):
            call()
    assert Version.at("./ds/versions/v1").id == "v1"  # a leading "./" is the one allowed
    assert list(tmp_path.iterdir()) == []
