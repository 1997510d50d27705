"""A committer frozen past its lease (SIGSTOP at a step of its commit, as a GC pause or a stopped
VM) must not destroy what another writer committed, nor write into a published version.

Writer A is a real committer process (tests/support/fenced_committer.py: the writer's task path and the
driver's commit, no JVM) that stops itself at one named step; writer B takes over the expired
lock and commits; A resumes; C appends after both. Every committed sample must be there, read
back from the tars by Python's tarfile, and validation must pass. On local disk and on the GCS
emulator.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import time
import uuid

import pytest

from spark_webdataset import fault_points as faults
from spark_webdataset.dataset.layout import Dataset, Version
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import LostCommitLock, NotCommitted, VersionSealed
from spark_webdataset.format.manifest import Manifest, ShardEntry
from tests.support import SUPPORT
from tests.support.fenced_committer import commit_samples, keys

LEASE = 1.0  # seconds: A's lease runs out while it is stopped, B waits for that and takes over


def start_frozen(uri: str, prefix: str, count: int, step: str) -> subprocess.Popen:
    """Writer A, stopped by itself at `step` of its commit (SIGSTOP); fails the test if it ends first."""
    environment = {**os.environ, faults.ENV: f"{step}=stop"}
    process = subprocess.Popen(
        [sys.executable, str(SUPPORT / "fenced_committer.py"), uri, prefix, str(count), str(LEASE)],
        env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"writer A ended before reaching {step}: {process.communicate()}")
        with open(f"/proc/{process.pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "T":
                return process
        time.sleep(0.05)
    process.kill()
    pytest.fail(f"writer A never reached {step}")


def resume(process: subprocess.Popen) -> tuple[int, str]:
    os.kill(process.pid, signal.SIGCONT)
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


def keys_in_tars(version: Version) -> list[str]:
    """Every sample key of every shard the manifest lists, parsed by Python's tarfile."""
    storage = version.storage
    found = []
    for shard in version.read_manifest().shards:
        with tarfile.open(fileobj=io.BytesIO(storage.read_bytes(version.path(shard.name)))) as tar:
            found += list(dict.fromkeys(member.name.split(".", 1)[0] for member in tar.getmembers()))
    return found


@pytest.fixture(params=["local", "gcs"])
def root(tmp_path, request) -> str:
    """A dataset root on local disk, or in a fresh bucket of the emulator."""
    if request.param == "local":
        return str(tmp_path / "ds")
    name = f"fencing-{uuid.uuid4().hex[:20]}"
    request.getfixturevalue("gcs_emulator").create_bucket(name)
    return f"gs://{name}/ds"


# step -> whether A's samples are committed in the end (its journal decided them before it froze)
STEPS = {
    "commit:planned": False,  # after its last renewal, before its journal: it must change nothing
    "commit:journal-written": True,  # decided: B finishes A's commit (roll forward), A reports success
    "commit:renamed-one": True,  # mid-rename
    "commit:renamed": True,  # all renamed, before the manifest
}


@pytest.mark.parametrize("step", list(STEPS))
def test_a_stalled_committer_destroys_nothing(root: str, step: str) -> None:
    version = Dataset(root).version("v1")
    commit_samples(version.uri, "p", 50)
    stalled = start_frozen(version.uri, "a", 30, step)
    commit_samples(version.uri, "b", 100)  # waits for A's lease to run out, takes the lock over
    code, stderr = resume(stalled)
    commit_samples(version.uri, "c", 20)  # and whatever A left behind is settled by the next writer

    expected = keys("p", 50) + (keys("a", 30) if STEPS[step] else []) + keys("b", 100) + keys("c", 20)
    assert sorted(keys_in_tars(version)) == sorted(expected)
    assert version.read_manifest().samples == len(expected)
    if STEPS[step]:
        assert code == 0, stderr  # finished by B's roll forward: A reports success, not ConcurrentCommit
    else:
        assert code == 3 and ("LostCommitLock" in stderr or "ConcurrentCommit" in stderr), stderr
    report = validate_version(version.uri)
    assert report.ok, report.summary()
    assert not version.storage.exists(version.journal_uri)


def snapshot(version: Version) -> dict[str, bytes]:
    """Every object of the version directory but a dead job's staging, by name."""
    storage = version.storage
    objects = {name: storage.read_bytes(version.path(name)) for name in storage.list_sizes(version.uri)}
    for directory in storage.list_dirs(version.uri):
        if directory != "_staging":
            objects.update(
                {
                    f"{directory}/{name}": storage.read_bytes(version.path(directory, name))
                    for name in storage.list_sizes(version.path(directory))
                }  # fmt: skip
            )
    return objects


@pytest.mark.parametrize("step", ["commit:planned", "commit:journal-written"])
def test_a_stalled_committer_cannot_write_into_a_published_version(root: str, step: str) -> None:
    version = Dataset(root).version("v1")
    commit_samples(version.uri, "p", 50)
    stalled = start_frozen(version.uri, "a", 30, step) if step == "commit:planned" else None
    if stalled is None:
        # decided before it froze: publish finds its journal, refuses, and leaves no seal behind;
        # A resumes to find its lock gone and leaves its decided journal to the next writer
        stalled = start_frozen(version.uri, "a", 30, step)
        assert validate_version(version.uri).ok
        with pytest.raises(NotCommitted, match="unfinished"):
            publish(root, "v1")
        assert not version.is_sealed()
        code, stderr = resume(stalled)
        assert code == 3 and "LostCommitLock" in stderr, stderr
        commit_samples(version.uri, "c", 20)  # finishes A's commit first (roll forward), then its own
        assert sorted(keys_in_tars(version)) == sorted(keys("p", 50) + keys("a", 30) + keys("c", 20))
        assert validate_version(version.uri).ok and publish(root, "v1").samples == 100
        return
    assert validate_version(version.uri).ok
    time.sleep(LEASE)  # publish takes the lock over once A's lease ran out
    published = publish(root, "v1")
    assert published.samples == 50
    before = snapshot(version)
    code, stderr = resume(stalled)
    assert code == 3 and ("LostCommitLock" in stderr or "VersionSealed" in stderr), stderr
    assert snapshot(version) == before  # byte for byte: no shard, journal or manifest change
    assert validate_version(version.uri, write_report=False).ok
    assert Dataset(root).latest()[1].samples == 50


def test_a_publisher_stalled_before_its_seal_publishes_nothing(root: str) -> None:
    version = Dataset(root).version("v1")
    commit_samples(version.uri, "p", 50)
    assert validate_version(version.uri).ok
    environment = {**os.environ, faults.ENV: "publish:sealing=stop"}
    code = f"from spark_webdataset.dataset.publish import publish; publish({root!r}, 'v1', lease_seconds={LEASE})"
    publisher = subprocess.Popen(
        [sys.executable, "-c", code], env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while open(f"/proc/{publisher.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
        assert publisher.poll() is None and time.monotonic() < deadline, publisher.communicate()
        time.sleep(0.05)
    commit_samples(version.uri, "b", 10)  # an append lands while the publisher is frozen past its lease
    code, stderr = resume(publisher)
    assert code != 0 and "LostCommitLock" in stderr, stderr
    assert not version.is_sealed() and not version.is_published()
    assert Dataset(root).read_latest() is None
    assert validate_version(version.uri).ok and publish(root, "v1").samples == 60


def test_a_stale_journal_is_discarded_not_applied(tmp_path) -> None:
    """A journal planned against a manifest that is gone (its committer froze before writing it,
    then wrote it late) is never applied by the next committer."""
    from spark_webdataset.dataset.journal import Journal, roll_forward
    from spark_webdataset.dataset.lock import CommitLock

    version = Dataset(str(tmp_path / "ds")).version("v1")
    commit_samples(version.uri, "p", 20)
    manifest_before = version.read_manifest()
    staged = "_staging/late/p00000-a0-t0/000000.tar"
    version.storage.write_atomic(version.path(staged), b"a stale committer's shard")
    planned = Manifest(
        shards=[ShardEntry("shard-000009.tar", 1, 25, "z", "z", crc32c="AAAAAA==")],
        fields=manifest_before.fields,
        options=manifest_before.options,
    )
    stale = Journal("late", False, [(staged, "shard-000009.tar")], planned.to_json(), base="0" * 64)
    version.storage.write_atomic(version.journal_uri, stale.to_json())
    with CommitLock(version, "next") as lock:
        assert roll_forward(version, lock) is False
    assert not version.storage.exists(version.journal_uri)
    assert not version.storage.exists(version.shard_uri("shard-000009.tar"))
    assert version.read_manifest() == manifest_before and validate_version(version.uri).ok


def test_lost_lock_is_a_concurrent_commit(tmp_path) -> None:
    from spark_webdataset.dataset.lock import CommitLock
    from spark_webdataset.errors import ConcurrentCommit

    version = Dataset(str(tmp_path / "ds")).version("v1")
    holder = CommitLock(version, "frozen", lease_seconds=0.2).acquire()
    time.sleep(0.3)
    with CommitLock(version, "taker"):
        with pytest.raises(LostCommitLock) as caught:
            holder.check()
    assert isinstance(caught.value, ConcurrentCommit)
    assert not isinstance(caught.value, VersionSealed)


# -- each fence on its own: a committer that passed its lease check and froze right before its
# next write (the gap the lease check cannot close), made deterministic with a fault point --


def test_a_late_rename_never_replaces_a_committed_shard(tmp_path) -> None:
    from spark_webdataset.errors import PreconditionFailed
    from spark_webdataset.storage.local import LocalStorage

    storage = LocalStorage()
    committed, late = tmp_path / "shard-000006.tar", tmp_path / "late.tar"
    committed.write_bytes(b"another writer's committed shard")
    late.write_bytes(b"a stale committer's shard")
    with pytest.raises(PreconditionFailed):
        storage.rename_new(str(late), str(committed))
    assert committed.read_bytes() == b"another writer's committed shard" and late.exists()


def test_a_late_delete_never_removes_the_object_that_took_the_name(tmp_path) -> None:
    from spark_webdataset.storage.local import LocalStorage

    storage = LocalStorage()
    path = tmp_path / "shard-000003.tar"
    path.write_bytes(b"a leftover")
    listed = storage.identities(str(tmp_path))["shard-000003.tar"]
    path.unlink()  # the leftover went (another committer's sweep), and a new commit named its shard
    path.write_bytes(b"a committed shard that took the name")
    assert storage.delete_if_identity(str(path), listed) is False
    assert path.read_bytes() == b"a committed shard that took the name"
    assert storage.delete_if_identity(str(path), storage.identities(str(tmp_path))["shard-000003.tar"])


def test_a_taken_journal_slot_is_never_overwritten(tmp_path) -> None:
    """Another committer claimed the slot between our lease check and our claim: we back off."""
    from spark_webdataset.errors import ConcurrentCommit

    version = Dataset(str(tmp_path / "ds")).version("v1")
    commit_samples(version.uri, "p", 20)
    from spark_webdataset.dataset.journal import Journal

    theirs = Journal("theirs", False, [], version.storage.read_bytes(version.manifest_uri)).to_json()
    faults.install("commit:planned", lambda: version.storage.write_atomic(version.journal_uri, theirs))
    try:
        with pytest.raises(ConcurrentCommit, match="theirs"):
            commit_samples(version.uri, "a", 10)
    finally:
        faults.clear()
    assert version.storage.read_bytes(version.journal_uri) == theirs
    assert sorted(keys_in_tars(version)) == sorted(keys("p", 20))


def test_roll_forward_never_overwrites_a_manifest_that_moved(tmp_path) -> None:
    """Finishing another's journal, the manifest changes between our last read and our swap: the
    swap is a compare-and-swap, so the other manifest stays and the roll forward fails."""
    from spark_webdataset.errors import ConcurrentCommit

    version = Dataset(str(tmp_path / "ds")).version("v1")
    commit_samples(version.uri, "p", 20)
    stalled = start_frozen(version.uri, "a", 10, "commit:journal-written")  # decided, then frozen
    moved = version.read_manifest()
    moved.run["moved"] = True  # what a committer that froze between its check and its swap would write
    faults.install("commit:swapping", lambda: version.storage.write_atomic(version.manifest_uri, moved.to_json()))
    try:
        with pytest.raises(ConcurrentCommit):
            commit_samples(version.uri, "b", 10)  # takes the lock over, finishes A's journal first
    finally:
        faults.clear()
        stalled.kill()
        stalled.wait()
    assert version.read_manifest() == moved


def test_concurrent_requests_renewing_at_once_do_not_lose_the_lock(tmp_path) -> None:
    """The commit's rename threads check the lease together: concurrent renewals are one at a
    time, so the second does not mistake the first's new token for a takeover."""
    import threading

    from spark_webdataset.dataset.lock import CommitLock

    version = Dataset(str(tmp_path / "ds")).version("v1")
    lock = CommitLock(version, "many-threads", lease_seconds=0.02).acquire()
    failures: list[BaseException] = []

    def renew_often() -> None:
        try:
            for _ in range(50):
                lock.check()
                time.sleep(0.002)
        except BaseException as error:  # noqa: BLE001 - collected and asserted below
            failures.append(error)

    threads = [threading.Thread(target=renew_often) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    lock.release()
