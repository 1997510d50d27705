"""Roll forward: a commit that died after writing its journal is finished by the next committer.

Spark is not needed: the journal, the staged files and the lock are plain objects on local
disk, laid out as a dead driver leaves them (its staging, its journal, maybe some renames done).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from spark_webdataset.dataset.journal import Journal, journal_job, roll_forward
from spark_webdataset.dataset.layout import Version
from spark_webdataset.dataset.lock import CommitLock
from spark_webdataset.errors import NotCommitted
from spark_webdataset.format.manifest import Manifest, ShardEntry

JOB = "deadjob"


def manifest(*names: str, sample_index: str = "_index/000001.parquet") -> bytes:
    shards = [ShardEntry(name, 1, 1024, f"k{i}", f"k{i}", crc32c="AAAAAA==") for i, name in enumerate(names)]
    return Manifest(
        shards=shards, fields=[{"name": "txt", "type": "string"}], options={}, sample_index=sample_index
    ).to_json()


def dead_commit(directory: Path, renames: list[tuple[str, str]], overwrite: bool = False) -> Version:
    """A version directory as a driver that died right after writing its journal leaves it."""
    version = Version.at(str(directory))
    for staged, final in renames:
        path = directory / staged
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"bytes of {final}".encode())
    finals = [final for _, final in renames if final.startswith("shard-")]
    planned_against = directory / "_manifest.json"  # the manifest the dead committer read
    base = hashlib.sha256(planned_against.read_bytes()).hexdigest() if planned_against.exists() else None
    journal = Journal(JOB, overwrite, renames, manifest(*finals), base)
    Path(version.journal_uri).write_bytes(journal.to_json())
    return version


def staged(name: str) -> str:
    return f"_staging/{JOB}/p00000-a0-t1/{name}"


def test_no_journal_means_nothing_to_finish(tmp_path) -> None:
    version = Version.at(str(tmp_path))
    with CommitLock(version, "next") as lock:
        assert roll_forward(version, lock) is False
    assert journal_job(version) is None


def test_a_dead_commit_is_finished_once_and_its_leftovers_go(tmp_path) -> None:
    renames = [(staged("000000.tar"), "shard-000000.tar"), (staged("000001.tar"), "shard-000001.tar"),
               (f"_staging/{JOB}/index-000001.parquet", "_index/000001.parquet")]  # fmt: skip
    version = dead_commit(tmp_path, renames)
    (tmp_path / "shard-000007.tar").write_bytes(b"a shard no manifest lists")
    (tmp_path / "_index").mkdir()
    (tmp_path / "_index" / "000000.parquet").write_bytes(b"an older sample index")
    # the dead driver had done its first rename already
    (tmp_path / staged("000000.tar")).rename(tmp_path / "shard-000000.tar")
    assert journal_job(version) == JOB

    with CommitLock(version, "next") as lock:
        assert roll_forward(version, lock) is True
    assert (tmp_path / "shard-000000.tar").read_bytes() == b"bytes of shard-000000.tar"
    assert (tmp_path / "shard-000001.tar").read_bytes() == b"bytes of shard-000001.tar"
    assert Manifest.from_json((tmp_path / "_manifest.json").read_bytes()).sample_index == "_index/000001.parquet"
    assert sorted(p.name for p in (tmp_path / "_index").iterdir()) == ["000001.parquet"]
    assert not (tmp_path / "shard-000007.tar").exists()  # unlisted: a leftover of the dead job
    assert not Path(version.journal_uri).exists() and not (tmp_path / "_staging").exists()
    with CommitLock(version, "later") as lock:
        assert roll_forward(version, lock) is False  # finished once


def test_an_overwrite_replaces_the_old_manifest(tmp_path) -> None:
    (tmp_path / "_manifest.json").write_bytes(manifest("shard-000000.tar", "shard-000001.tar"))
    (tmp_path / "shard-000001.tar").write_bytes(b"old")
    renames = [
        (staged("000000.tar"), "shard-000000.tar"),
        (f"_staging/{JOB}/index-000000.parquet", "_index/000000.parquet"),
    ]
    version = dead_commit(tmp_path, renames, overwrite=True)
    with CommitLock(version, "next") as lock:
        assert roll_forward(version, lock)
    document = Manifest.from_json((tmp_path / "_manifest.json").read_bytes())
    assert [s.name for s in document.shards] == ["shard-000000.tar"]
    assert not (tmp_path / "shard-000001.tar").exists()


def test_a_journal_whose_staged_shard_is_gone_is_not_committed(tmp_path) -> None:
    renames = [
        (staged("000000.tar"), "shard-000000.tar"),
        (f"_staging/{JOB}/index-000000.parquet", "_index/000000.parquet"),
    ]
    version = dead_commit(tmp_path, renames)
    (tmp_path / staged("000000.tar")).unlink()  # neither staged nor final: the data is lost
    with CommitLock(version, "next") as lock, pytest.raises(NotCommitted) as caught:
        roll_forward(version, lock)
    assert JOB in str(caught.value) and staged("000000.tar") in str(caught.value)
    assert not (tmp_path / "_manifest.json").exists()  # nothing half-finished becomes visible


def test_a_rename_in_flight_when_its_committer_lost_the_lock_says_so_not_that_data_is_lost(tmp_path) -> None:
    """A committer frozen with a rename in flight (`kill -STOP` while its rename threads run) resumes
    after another took the lock over, finished its journal and a later commit replaced the file: the
    rename finds neither source nor target. That is LostCommitLock (the commit then asks whether its
    journal landed), not NotCommitted. The lock here is a fake that was lost after the rename began
    (the thread had passed its check): the real one cannot be made to lose it between two lines."""
    from spark_webdataset.dataset.journal import _rename_one
    from spark_webdataset.errors import LostCommitLock

    renames = [(f"_staging/{JOB}/index-000001.parquet", "_index/000001.parquet")]
    version = dead_commit(tmp_path, renames)
    (tmp_path / renames[0][0]).unlink()  # moved on: renamed by the finisher, then replaced by a later commit

    class LostAfterTheFirstCheck:
        checks = 0

        def check(self) -> None:
            self.checks += 1
            if self.checks > 1:
                raise LostCommitLock("the lease was taken over")

    with pytest.raises(LostCommitLock):
        _rename_one(
            version, Journal.from_json(Path(version.journal_uri).read_bytes()), *renames[0], LostAfterTheFirstCheck()
        )
