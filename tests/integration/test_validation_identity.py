"""A storage identity is a cache of "already verified", not the proof (DESIGN "Every byte a reader
returns was checked"): a child's validation trusts a referenced shard whose identity is the one its
storing version's sealed report recorded, and reads and checks the crc32c of one whose identity
moved. A copied root (new inodes, ctimes, generations) still validates; tampered bytes fail, even
with the mtime put back. Versions come from tests/support/chains.py (real writer, validate, publish;
no Spark)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.storage import storage_for
from tests.support.chains import build_chain, commit_version


def _child(root: str) -> str:
    """v1 published (no parent), v2 committed on it: its first shards are v1's, referenced."""
    build_chain(root, ["v1"], per_version=40)
    commit_version(root, "v2", 40, 20, parent="v1")
    child = Dataset(root).version("v2").uri
    assert validate_version(child, workers=1).ok
    return child


def _flip_keeping_mtime(path: Path, at: int = 600) -> None:
    """One payload byte flipped in place, atime and mtime put back to the nanosecond."""
    before = os.stat(path)
    data = bytearray(path.read_bytes())
    data[at] ^= 1
    with open(path, "r+b") as stream:
        stream.seek(at)
        stream.write(bytes(data[at : at + 1]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def _referenced_errors(report, shard: str, stored_in: str) -> list[dict]:
    return [
        e
        for e in report.errors
        if e["shard"] == f"../{stored_in}/{shard}" and f"{shard} of version {stored_in}" in e["error"]
    ]


def test_local_identity_includes_ctime_which_utime_cannot_put_back(tmp_path) -> None:
    shard = tmp_path / "shard-000000.tar"
    shard.write_bytes(b"x" * 4096)
    storage = storage_for(str(tmp_path))
    before = storage.identities(str(tmp_path))["shard-000000.tar"]
    _flip_keeping_mtime(shard, 100)
    assert storage.identities(str(tmp_path))["shard-000000.tar"] != before


def test_a_byte_flipped_in_a_parents_shard_with_mtime_put_back_fails_the_childs_default_validation(tmp_path) -> None:
    root = str(tmp_path / "data")
    child = _child(root)
    shard = sorted((tmp_path / "data" / "versions" / "v1").glob("shard-*.tar"))[1]
    _flip_keeping_mtime(shard)
    report = validate_version(child, workers=1, write_report=False)
    assert not report.ok
    found = _referenced_errors(report, shard.name, "v1")
    assert found and all("ChecksumMismatch" in e["error"] for e in found), report.errors
    assert report.error_count == len(found)  # only that shard: the others' identities are unchanged


def test_a_parents_shard_whose_identity_moved_is_read_and_passes_with_equal_bytes(tmp_path) -> None:
    """Same bytes rewritten (new inode, mtime, ctime): read, crc32c equal, ok; the child's report
    records the identity it verified."""
    root = str(tmp_path / "data")
    child = _child(root)
    shard = sorted((tmp_path / "data" / "versions" / "v1").glob("shard-*.tar"))[0]
    data = shard.read_bytes()
    shard.unlink()
    shard.write_bytes(data)
    report = validate_version(child, workers=1)
    assert report.ok, report.errors
    now = storage_for(root).identities(str(shard.parent))[shard.name]
    row = next(r for r in report.shards if r["name"] == f"../v1/{shard.name}")
    assert row["identity"] == json.loads(json.dumps(now)) and row["verified_by"] == "read"
    other = next(r for r in report.shards if r["name"].startswith("../v1/") and r["name"] != f"../v1/{shard.name}")
    assert other["verified_by"] == "identity"
    # the parent's sha256 carries over (publish puts it in the child's shardindex.json)
    parent_rows = {r["name"]: r for r in json.loads((shard.parent / "_validation.json").read_text())["shards"]}
    for row in (r for r in report.shards if r["name"].startswith("../v1/")):
        assert row["sha256"] == parent_rows[row["name"][len("../v1/") :]]["sha256"] and row["sha256"]


@pytest.mark.parametrize("how", ["copytree", "cp -r"])
def test_a_copied_root_still_validates(tmp_path, how) -> None:
    root = str(tmp_path / "data")
    _child(root)
    copy = tmp_path / "elsewhere" / "data"
    copy.parent.mkdir()
    if how == "copytree":
        shutil.copytree(root, copy)  # copy2: mtimes kept, inodes and ctimes new
    else:
        subprocess.run(["cp", "-r", root, str(copy)], check=True)
    report = validate_version(str(copy / "versions" / "v2"), workers=1)
    assert report.ok, report.errors
    referenced = [r for r in report.shards if r["name"].startswith("../v1/")]
    assert referenced and all(r["verified_by"] == "read" for r in referenced)
    # and in the copy, tampering is still found
    _flip_keeping_mtime(sorted((copy / "versions" / "v1").glob("shard-*.tar"))[0])
    assert not validate_version(str(copy / "versions" / "v2"), workers=1, write_report=False).ok


def test_a_parent_report_without_identities_proves_nothing_by_size_and_crc_alone(tmp_path) -> None:
    """A report from before reports recorded identities: every referenced shard is read."""
    root = str(tmp_path / "data")
    child = _child(root)
    report_path = tmp_path / "data" / "versions" / "v1" / "_validation.json"
    older = json.loads(report_path.read_text())
    for row in older["shards"]:
        row.pop("identity")
    report_path.write_text(json.dumps(older))
    assert validate_version(child, workers=1, write_report=False).ok
    shard = sorted((tmp_path / "data" / "versions" / "v1").glob("shard-*.tar"))[0]
    _flip_keeping_mtime(shard)
    report = validate_version(child, workers=1, write_report=False)
    assert not report.ok and _referenced_errors(report, shard.name, "v1"), report.errors


def test_on_gcs_a_parents_shard_overwritten_with_other_bytes_fails_and_with_the_same_bytes_passes(bucket) -> None:
    root = f"{bucket}/data"
    child = _child(root)
    storage = storage_for(root)
    v1 = Dataset(root).version("v1")
    name = sorted(n for n in storage.list_sizes(v1.uri) if n.endswith(".tar"))[0]
    data = storage.read_bytes(v1.shard_uri(name))
    storage.write_atomic(v1.shard_uri(name), data)  # a new generation, the same bytes
    same = validate_version(child, workers=1, write_report=False)
    assert same.ok, same.errors
    assert next(r for r in same.shards if r["name"] == f"../v1/{name}")["verified_by"] == "read"
    flipped = bytearray(data)
    flipped[600] ^= 1
    storage.write_atomic(v1.shard_uri(name), bytes(flipped))
    report = validate_version(child, workers=1, write_report=False)
    assert not report.ok
    assert any("ChecksumMismatch" in e["error"] for e in _referenced_errors(report, name, "v1")), report.errors


def test_a_shard_changed_after_validation_read_it_is_not_vouched_for_by_its_report(tmp_path) -> None:
    """The report records the identity the shard had before it was read: a write during or after
    the check leaves another identity, so a child reads that shard again and finds the change."""
    from spark_webdataset import fault_points as faults
    from spark_webdataset.dataset.publish import publish

    root = str(tmp_path / "data")
    commit_version(root, "v1", 0, 40)
    shard = sorted((tmp_path / "data" / "versions" / "v1").glob("shard-*.tar"))[0]
    faults.install("validate:shards-checked", lambda: _flip_keeping_mtime(shard))
    try:
        assert validate_version(Dataset(root).version("v1").uri, workers=1).ok  # it read the bytes before the flip
    finally:
        faults.clear()
    publish(root, "v1")
    commit_version(root, "v2", 40, 10, parent="v1")
    report = validate_version(Dataset(root).version("v2").uri, workers=1, write_report=False)
    assert not report.ok and _referenced_errors(report, shard.name, "v1"), report.errors
