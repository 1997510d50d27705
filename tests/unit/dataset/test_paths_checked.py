"""Paths are checked before anything is created (docs/design.md, ../shared/DESIGN.md): without Spark.

Version ids are ASCII only; every entry point normalises a URI and refuses `..`, `.` and empty
parts, NUL and control characters, over-long names and paths, a version directory whose id breaks
the rule, a root inside another root, and a write whose target is itself a dataset root. A failed
write or publish leaves no version directory. With Spark: tests/integration/test_paths_checked.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import spark_webdataset
from spark_webdataset import cli
from spark_webdataset.dataset.layout import Dataset, Version
from spark_webdataset.dataset.paths import check_dataset_root, check_version_id
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.tree import LEASE_NAME
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import (
    DuplicateKey,
    InputError,
    InvalidVersionId,
    ManifestChanged,
    NestedDatasetRoot,
    PublishRefused,
)
from spark_webdataset.spark.options import WriteOptions
from spark_webdataset.spark.writer import WebDatasetWriter
from tests.support.fenced_committer import SCHEMA, commit_samples, published
from tests.support.helpers import snapshot_files

# Look-alikes: full-width digits, a Cyrillic 'а' and 'о', Arabic-Indic and superscript digits, a
# trailing newline (`$` would take it), a combining mark.
LOOK_ALIKE_IDS = ["２０２６", "v1а", "vоl", "٢٠٢٦", "v²", "v1\n", "v1\u0301", "ｖ1"]
BAD_IDS = ["..", ".", ".hidden", "a/b", "../x", "v..1", "", "x" * 129, "a b", "-v", "v1\x00", "v1\x7f"]


@pytest.mark.parametrize("version", LOOK_ALIKE_IDS + BAD_IDS)
def test_version_ids_are_ascii_and_by_the_rule(version) -> None:
    with pytest.raises(InvalidVersionId):
        check_version_id(version)
    with pytest.raises(InputError):
        Dataset("/data/ds").version(version)


@pytest.mark.parametrize("version", ["v1", "2026-12-01", "20261201T000000Z", "a.b_c-d", "x" * 128])
def test_version_ids_by_the_rule_are_accepted(version) -> None:
    assert check_version_id(version) == version
    assert Version.at(f"/data/ds/versions/{version}").id == version


@pytest.mark.parametrize(
    "tail",
    ["versions/..", "versions/../x", "versions/./v1", "versions//v1", "./versions/v1/..", "a/../versions/v1",
     "versions/.hidden", "versions/２０２６", "versions/v1а", "versions/v\x00", "versions/v\n1", "versions/v1/\x1b"],
)  # fmt: skip
@pytest.mark.parametrize("scheme", ["", "file://", "gs://bucket/"])
def test_uris_are_normalised_and_refused_before_storage_is_touched(tmp_path, tail, scheme) -> None:
    base = f"{scheme}{tmp_path}/ds" if scheme != "gs://bucket/" else "gs://bucket/ds"
    uri = f"{base}/{tail}"
    for call in (lambda: Version.at(uri), lambda: Version.at(uri).check_writable(), lambda: Dataset(uri),
                 lambda: check_dataset_root(uri)):  # fmt: skip
        with pytest.raises(InputError):
            call()  # gs:// without an emulator: a storage call would not be a typed InputError
    assert not (tmp_path / "ds").exists()


def test_a_bad_version_directory_is_an_invalid_version_id(tmp_path) -> None:
    for name in [".hidden", "２０２６", "v1а", "v" * 129, "-v", "a b"]:
        with pytest.raises(InvalidVersionId, match="version id"):
            Version.at(f"{tmp_path}/versions/{name}")


@pytest.mark.parametrize("uri", ["x" * 5000, "/tmp/" + "x" * 256, "/tmp/" + "é" * 128, "/tmp/" + "a/" * 2100 + "b"])
def test_over_long_paths_are_input_errors_before_storage_is_touched(tmp_path, uri, capsys) -> None:
    for call in (lambda: Version.at(uri), lambda: Dataset(uri), lambda: spark_webdataset.open(uri),
                 lambda: publish(uri, "v1"), lambda: validate_version(uri)):  # fmt: skip
        with pytest.raises(InputError, match="bytes"):
            call()
    assert cli.main(["get", uri, "k1"]) == 2
    assert "error:" in capsys.readouterr().err


def test_a_5000_character_path_to_get_is_an_error_not_a_traceback(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "spark_webdataset.cli", "get", str(tmp_path / ("x" * 5000)), "k1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "bytes" in result.stderr


def _root_with_unpublished_version(tmp_path: Path) -> str:
    root = str(tmp_path / "ds")
    commit_samples(Dataset(root).version("v1").uri, "k", 3)
    return root


@pytest.mark.parametrize("tail", ["", "versions/v1/x", "versions/a/b", "versions", "other", "versions/v1/versions/v2"])
def test_a_write_into_or_onto_a_dataset_root_is_refused(tmp_path, tail) -> None:
    root = _root_with_unpublished_version(tmp_path)
    before = snapshot_files(tmp_path)
    target = f"{root}/{tail}".rstrip("/")
    with pytest.raises(NestedDatasetRoot):
        Version.at(target).check_writable()
    with pytest.raises(NestedDatasetRoot):
        WebDatasetWriter(WriteOptions.parse({"path": target}), SCHEMA, overwrite=True)
    assert snapshot_files(tmp_path) == before


def test_a_write_to_a_version_that_is_itself_a_dataset_root_is_refused(tmp_path) -> None:
    """X/versions/inner, where inner holds a published dataset (LATEST, _published/, versions/)."""
    outer = tmp_path / "x"
    published(str(tmp_path / "inner"), "v1")
    (outer / "versions").mkdir(parents=True)
    os.rename(tmp_path / "inner", outer / "versions" / "inner")  # an old writer's work, or a copy
    before = snapshot_files(tmp_path)
    target = Dataset(str(outer)).version("inner")
    with pytest.raises(NestedDatasetRoot, match="is itself a dataset root"):
        target.check_writable()
    with pytest.raises(NestedDatasetRoot, match="is itself a dataset root"):
        WebDatasetWriter(WriteOptions.parse({"path": target.uri}), SCHEMA, overwrite=True)
    for mark in ("LATEST", "_published/v0.json", "versions/v0/_manifest.json"):  # each mark alone shows a root
        other = tmp_path / f"only-{mark.split('/')[0]}"
        (other / "versions" / "v1" / mark).parent.mkdir(parents=True, exist_ok=True)
        (other / "versions" / "v1" / mark).write_text("{}")
        with pytest.raises(NestedDatasetRoot, match="is itself a dataset root"):
            Dataset(str(other)).version("v1").check_writable()
    assert snapshot_files(tmp_path).keys() >= before.keys()
    assert {k: v for k, v in snapshot_files(tmp_path).items() if k in before} == before


def test_a_dataset_root_inside_an_unpublished_root_is_refused(tmp_path) -> None:
    root = _root_with_unpublished_version(tmp_path)
    with pytest.raises(NestedDatasetRoot, match=f"lies inside the root of dataset {root}"):
        check_dataset_root(f"{root}/other")
    with pytest.raises(NestedDatasetRoot):
        publish(f"{root}/versions/v1/x", "v1")
    assert check_dataset_root(str(tmp_path / "sibling")) == str(tmp_path / "sibling")


def _failing_commit(uri: str) -> None:
    """A write whose commit fails (the same keys from two tasks), aborted as Spark aborts it."""
    writer = WebDatasetWriter(WriteOptions.parse({"path": uri}), SCHEMA, overwrite=True)
    batch = lambda: pa.record_batch([pa.array(["k1", "k2"]), pa.array(["a", "b"])], names=["__key__", "txt"])  # noqa: E731
    messages = [writer.write(iter([batch()])), writer.write(iter([batch()]))]
    messages[1].partition = 1
    with pytest.raises(DuplicateKey):
        writer.commit(messages)
    writer.abort(messages)


def committer_write(uri: str) -> None:
    """One task's staging and the driver's commit, aborted on failure as Spark aborts a job."""
    writer = WebDatasetWriter(WriteOptions.parse({"path": uri}), SCHEMA, overwrite=True)
    batch = pa.record_batch([pa.array(["k1"]), pa.array(["a"])], names=["__key__", "txt"])
    message = writer.write(iter([batch]))
    try:
        writer.commit([message])
    except Exception:
        writer.abort([message])
        raise


def test_a_failed_write_to_a_fresh_version_leaves_no_directory(tmp_path) -> None:
    root = str(tmp_path / "ds")
    published(root, "v1")
    before = snapshot_files(tmp_path)
    _failing_commit(Dataset(root).version("fresh").uri)
    assert not (tmp_path / "ds" / "versions" / "fresh").exists(), snapshot_files(tmp_path / "ds" / "versions")
    after = snapshot_files(tmp_path)
    assert after.keys() == before.keys()  # the same paths; versions/ itself saw an entry come and go
    assert {p: v for p, v in after.items() if p != "ds/versions"} == {
        p: v for p, v in before.items() if p != "ds/versions"
    }


def test_publishing_a_version_that_does_not_exist_creates_nothing(tmp_path, capsys) -> None:
    root = str(tmp_path / "ds")
    published(root, "v1")
    before = snapshot_files(tmp_path)
    with pytest.raises(PublishRefused, match="no version 'nope'"):
        publish(root, "nope")
    assert cli.main(["publish", root, "nope"]) == 1
    assert "no version 'nope'" in capsys.readouterr().err
    result = subprocess.run([sys.executable, "-m", "spark_webdataset.cli", "publish", root, "nope"],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr and "no version 'nope'" in result.stderr
    assert snapshot_files(tmp_path) == before
    assert not (tmp_path / "ds" / "versions" / "nope").exists()


def test_publish_removes_a_dead_jobs_staging_before_it_seals(tmp_path) -> None:
    root = str(tmp_path / "ds")
    version = Dataset(root).version("v1")
    commit_samples(version.uri, "k", 5)
    assert validate_version(version.uri).ok
    dead = Path(version.staging_uri) / "dead-job"
    (dead / "p00000-a0-t1").mkdir(parents=True)
    (dead / "p00000-a0-t1" / "000000.tar").write_bytes(b"\0" * 1024)
    # its driver ran on this host and is gone (a process that exited; a reused pid has another start time)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lease = {"job_id": "dead-job", "host": socket.gethostname(), "driver_pid": int(gone.stdout), "driver_started": 1}
    (dead / LEASE_NAME).write_text(json.dumps(lease))
    publish(root, "v1")
    assert version.is_sealed() and not Path(version.staging_uri).exists()


def test_a_live_jobs_staging_survives_publish(tmp_path) -> None:
    """Only what is provably dead goes: a lease with no driver we can see, freshly written, stays."""
    root = str(tmp_path / "ds")
    version = Dataset(root).version("v1")
    commit_samples(version.uri, "k", 5)
    assert validate_version(version.uri).ok
    live = Path(version.staging_uri) / "live-job"
    live.mkdir(parents=True)
    (live / LEASE_NAME).write_text(json.dumps({"job_id": "live-job", "host": "another-host", "driver_pid": 1}))
    publish(root, "v1")
    assert version.is_sealed() and (live / LEASE_NAME).exists()


def test_manifest_changed_says_what_is_wrong(tmp_path) -> None:
    root = str(tmp_path / "ds")
    published(root, "v1")
    dataset = Dataset(root)
    commit_samples(dataset.version("v2").uri, "k", 3)  # committed, never published
    with pytest.raises(ManifestChanged) as unpublished:
        dataset.published("v2")
    assert "None" not in str(unpublished.value) and "no publish record" in str(unpublished.value)
    assert "retired" in str(unpublished.value) and "never published" in str(unpublished.value)
    with pytest.raises(ManifestChanged) as absent:
        dataset.published("v3")
    assert "None" not in str(absent.value) and "no publish record" in str(absent.value)
    manifest = Path(dataset.version("v1").manifest_uri)
    manifest.write_bytes(manifest.read_bytes() + b" ")
    with pytest.raises(ManifestChanged, match="is not the one published") as changed:
        dataset.published("v1")
    assert "None" not in str(changed.value)
    manifest.unlink()
    with pytest.raises(ManifestChanged) as missing:
        dataset.published("v1")
    assert "None" not in str(missing.value) and "no _manifest.json" in str(missing.value)


def test_a_failed_write_to_a_fresh_root_removes_the_directories_it_made(tmp_path) -> None:
    _failing_commit(str(tmp_path / "new" / "versions" / "v1"))
    assert not (tmp_path / "new").exists()
    # a nested path that only the commit refuses (its own staging made ROOT/versions/ appear): nothing stays
    with pytest.raises(NestedDatasetRoot):
        committer_write(str(tmp_path / "other" / "versions" / "a" / "b"))
    assert not (tmp_path / "other").exists()
