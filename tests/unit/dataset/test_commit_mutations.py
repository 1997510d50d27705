"""The commit uses its storage primitives where it matters: each test here fails with one of the
one-line bugs issue 29 found the suite let through (named in each test), on the real writer and
commit, on local disk, with a fault point for the gap a frozen committer could fall into.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

import spark_webdataset
from spark_webdataset import fault_points as faults
from spark_webdataset.dataset.journal import Journal, digest, roll_forward
from spark_webdataset.dataset.layout import Dataset, Version
from spark_webdataset.dataset.lock import CommitLock
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import ConcurrentCommit, LostCommitLock
from spark_webdataset.format.manifest import Manifest, ShardEntry
from spark_webdataset.spark.options import WriteOptions
from spark_webdataset.spark.writer import WebDatasetWriter
from tests.support.fenced_committer import SCHEMA, commit_samples, keys


@pytest.fixture(autouse=True)
def no_faults_left():
    yield
    faults.clear()


def replace_file(path: Path, data: bytes) -> None:
    """Another object under the same name (a new inode: written beside it, then renamed over it)."""
    temp = path.with_name(path.name + ".new")
    temp.write_bytes(data)
    os.replace(temp, path)


# (a) the sweep deletes a listed leftover unconditionally instead of only if it is still the object listed


def test_the_sweep_never_removes_an_object_that_took_the_listed_name_after_the_listing(tmp_path) -> None:
    uri = str(tmp_path / "v")
    commit_samples(uri, "a", 10)  # shard-000000.tar, committed
    version = Version.at(uri)
    base = version.storage.read_bytes(version.manifest_uri)
    staged = "_staging/dead/p00000-a0-t0/000000.tar"
    (tmp_path / "v" / staged).parent.mkdir(parents=True)
    (tmp_path / "v" / staged).write_bytes(b"a dead committer's shard")
    planned = Manifest.from_json(base)
    planned = Manifest(
        shards=[*planned.shards, ShardEntry("shard-000001.tar", 1, 24, "z", "z", crc32c="AAAAAA==")],
        fields=planned.fields, options=planned.options, sample_index=planned.sample_index,
    )  # fmt: skip
    dead = Journal("dead", False, [(staged, "shard-000001.tar")], planned.to_json(), digest(base))
    version.storage.write_atomic(version.journal_uri, dead.to_json())
    leftover = tmp_path / "v" / "shard-000007.tar"
    leftover.write_bytes(b"a leftover of a commit that never finished")

    # Between the sweep's listing and its delete (the gap after its lease check), the leftover goes
    # and another committer names its committed shard shard-000007.tar and lists it.
    theirs = Manifest.from_json(base)
    theirs = Manifest(
        shards=[*theirs.shards, ShardEntry("shard-000007.tar", 1, 9, "b", "b", crc32c="AAAAAA==")],
        fields=theirs.fields, options=theirs.options, sample_index=theirs.sample_index,
    )  # fmt: skip

    def another_commit_lands() -> None:
        replace_file(leftover, b"committed")
        version.storage.write_atomic(version.manifest_uri, theirs.to_json())

    faults.install("commit:sweeping", another_commit_lands)
    with CommitLock(version, "next") as lock, pytest.raises(ConcurrentCommit):
        roll_forward(version, lock)  # the journal is stale now: its swap loses
    assert leftover.read_bytes() == b"committed"
    assert version.read_manifest() == theirs


# the sweep and the renames never remove a committed shard (one the manifest in place lists)


def test_a_change_appended_onto_a_version_keeps_the_shards_the_manifest_in_place_lists_until_its_swap(tmp_path) -> None:
    """A day's delete (mode append) onto its upsert rewrites the upsert's shard; its commit fails
    after its renames: the manifest in place still reads whole, and the next writer finishes it."""
    root = str(tmp_path / "ds")
    v1 = Dataset(root).version("v1").uri
    commit_samples(v1, "p", 30)
    assert validate_version(v1).ok
    publish(root, "v1")
    uri = Dataset(root).version("v2").uri
    upsert = WebDatasetWriter(WriteOptions.parse({"path": uri, "parent": "v1", "change": "upsert"}), SCHEMA, True)
    upsert.commit(
        [upsert.write(iter([pa.record_batch([pa.array(["p00005"]), pa.array(["new"])], names=["__key__", "txt"])]))]
    )
    after_upsert = {key: spark_webdataset.open(uri).get(key)["txt"] for key in spark_webdataset.open(uri).keys()}
    keys_only = StructType([StructField("__key__", StringType())])
    delete = WebDatasetWriter(WriteOptions.parse({"path": uri, "parent": "v1", "change": "delete"}), keys_only, False)
    message = delete.write(iter([pa.record_batch([pa.array(["p00006"])], names=["__key__"])]))
    faults.install("commit:renamed", "raise")
    with pytest.raises(faults.InjectedFault):
        delete.commit([message])
    samples = spark_webdataset.open(uri)
    assert {key: samples.get(key)["txt"] for key in samples.keys()} == after_upsert  # every listed shard is there
    commit_samples(uri, "q", 1)  # the next writer finishes the decided delete first
    samples = spark_webdataset.open(uri)
    assert "p00006" not in samples.keys() and samples.get("p00005")["txt"] == b"new"
    manifest = Version.at(uri).read_manifest()
    assert sorted(p.name for p in Path(uri).glob("*.tar")) == sorted(s.name for s in manifest.own_shards)
    assert validate_version(uri).ok


def test_finishing_a_journal_never_removes_a_committed_shard_that_holds_its_name(tmp_path) -> None:
    """A v1 journal (no base: applied as v1 committers did) that planned shard-000001.tar, while
    another commit named its shard so: the committed shard stays, the journal does not apply."""
    uri = str(tmp_path / "v")
    commit_samples(uri, "a", 20)  # shard-000000.tar and shard-000001.tar, committed
    version = Version.at(uri)
    committed = (tmp_path / "v" / "shard-000001.tar").read_bytes()
    manifest = version.read_manifest()
    staged = "_staging/old/p00000-a0-t0/000000.tar"
    (tmp_path / "v" / staged).parent.mkdir(parents=True)
    (tmp_path / "v" / staged).write_bytes(b"an old committer's shard")
    planned = Manifest(
        shards=[manifest.shards[0], ShardEntry("shard-000001.tar", 1, 23, "z", "z", crc32c="AAAAAA==")],
        fields=manifest.fields, options=manifest.options, sample_index=manifest.sample_index,
    )  # fmt: skip
    legacy = Journal("old", False, [(staged, "shard-000001.tar")], planned.to_json()).to_json()
    legacy = legacy.replace(b"commit-journal-v2", b"commit-journal-v1")
    version.storage.write_atomic(version.journal_uri, legacy)
    with (
        CommitLock(version, "next") as lock,
        pytest.raises(ConcurrentCommit, match="shard-000001.tar is a committed shard"),
    ):
        roll_forward(version, lock)
    assert (tmp_path / "v" / "shard-000001.tar").read_bytes() == committed
    assert version.read_manifest() == manifest


# (b) roll forward applies a pending journal in a sealed version


def test_a_journal_planted_in_a_published_version_is_never_applied(tmp_path) -> None:
    root = str(tmp_path / "ds")
    uri = Dataset(root).version("v1").uri
    commit_samples(uri, "a", 10)
    assert validate_version(uri).ok
    publish(root, "v1")
    version = Version.at(uri)
    published = version.storage.read_bytes(version.manifest_uri)
    staged = "_staging/planted/p00000-a0-t0/000000.tar"
    (tmp_path / "ds" / "versions" / "v1" / staged).parent.mkdir(parents=True)
    (tmp_path / "ds" / "versions" / "v1" / staged).write_bytes(b"planted")
    before = Manifest.from_json(published)
    planned = Manifest(
        shards=[*before.shards, ShardEntry("shard-000001.tar", 1, 7, "z", "z", crc32c="AAAAAA==")],
        fields=before.fields, options=before.options, sample_index=before.sample_index,
    )  # fmt: skip
    # pending by its base: planned against the published manifest itself
    planted = Journal("planted", False, [(staged, "shard-000001.tar")], planned.to_json(), digest(published))
    version.storage.write_atomic(version.journal_uri, planted.to_json())
    with CommitLock(version, "next") as lock:
        assert roll_forward(version, lock) is False
    assert version.storage.read_bytes(version.manifest_uri) == published
    assert not (tmp_path / "ds" / "versions" / "v1" / "shard-000001.tar").exists()
    latest_version, latest = Dataset(root).latest()  # no ManifestChanged
    assert latest_version.id == "v1" and latest.samples == 10


# (c) the lease check before the manifest swap removed


def test_a_committer_that_lost_its_lock_after_its_renames_writes_no_manifest(tmp_path) -> None:
    uri = str(tmp_path / "v")
    commit_samples(uri, "a", 10)
    version = Version.at(uri)
    before = version.storage.read_bytes(version.manifest_uri)
    taker = CommitLock(version, "taker", lease_seconds=60, wait_seconds=30)
    # after the renames the committer freezes past its lease and another takes the lock over
    # (acquire waits for the 0.2 s lease to run out, as a real taker does)
    faults.install("commit:renamed", taker.acquire)
    try:
        with pytest.raises(LostCommitLock):
            commit_samples(uri, "b", 10, lease_seconds=0.2)
        assert version.storage.read_bytes(version.manifest_uri) == before  # no manifest written
    finally:
        taker.release()
    commit_samples(uri, "c", 1)  # the decided commit is finished by the next writer
    samples = spark_webdataset.open(uri)
    assert sorted(samples.keys()) == keys("a", 10) + keys("b", 10) + ["c00000"]


# (d) a rewritten shard's manifest entry gains or loses sha256 against the dataset's checksum setting


def _write(uri: str, rows: dict[str, str], overwrite: bool, **options: str) -> None:
    writer = WebDatasetWriter(
        WriteOptions.parse({"path": uri, "maxSamplesPerShard": "10", **options}), SCHEMA, overwrite
    )
    names = sorted(rows)
    batch = pa.record_batch([pa.array(names), pa.array([rows[k] for k in names])], names=["__key__", "txt"])
    writer.commit([writer.write(iter([batch]))])


@pytest.mark.parametrize("parent_checksum", ["crc32c", "sha256"])
@pytest.mark.parametrize("child_checksum", ["crc32c", "sha256"])
def test_a_rewritten_shard_carries_sha256_exactly_when_the_version_asks_for_it(
    tmp_path, parent_checksum, child_checksum
) -> None:
    root = str(tmp_path / "ds")
    v1 = Dataset(root).version("v1").uri
    _write(v1, {f"k{i:03d}": f"text {i}" for i in range(30)}, True, checksum=parent_checksum)
    assert validate_version(v1).ok
    publish(root, "v1")
    v2 = Dataset(root).version("v2").uri
    _write(v2, {"k012": "replaced"}, True, parent="v1", change="upsert", checksum=child_checksum)
    manifest = Version.at(v2).read_manifest()
    assert manifest.run["change"]["shards_rewritten"] == 1
    assert len(manifest.own_shards) == 2  # the rewrite of k012's shard, and the shard of the upserted row
    for shard in manifest.own_shards:
        data = (Path(v2) / shard.name).read_bytes()
        if child_checksum == "sha256":
            assert shard.sha256 == hashlib.sha256(data).hexdigest(), shard
        else:
            assert shard.sha256 is None, shard
    assert validate_version(v2).ok


# (e) a committer frozen after its plan, whose lock was taken over meanwhile, leaves no journal


def test_a_committer_that_lost_its_lock_before_its_journal_leaves_no_stale_journal(tmp_path) -> None:
    uri = str(tmp_path / "v")
    commit_samples(uri, "a", 4)
    version = Version.at(uri)
    # frozen after its last lease check, past its 0.2 s lease: another job takes the lock over and
    # commits; the frozen one then writes its journal, planned against a manifest that is gone
    faults.install("commit:planned", lambda: commit_samples(uri, "c", 2))
    with pytest.raises(LostCommitLock):
        commit_samples(uri, "b", 3, lease_seconds=0.2)
    assert not version.storage.exists(version.journal_uri), "the failed job left its stale journal behind"
    assert version.storage.list_dirs(version.staging_uri) == []
    samples = spark_webdataset.open(uri)
    assert sorted(samples.keys()) == keys("a", 4) + keys("c", 2)
