"""A failed job leaves nothing, whatever the timing (issue 29, item 8): a sibling task still staging
when Spark's abort() runs removes what it stages; the next writer removes an aborted job's staging
at once. CI once failed on `p00000-a0-t52/000001.tar`, staged after the abort.

The race is made deterministic: the real writer's task (`write()`, in a thread as a Python worker
runs it) is held at a fault point until the driver's `abort()` has returned, then goes on.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from spark_webdataset import fault_points as faults
from spark_webdataset.dataset.layout import Version
from spark_webdataset.dataset.staging import clean_dead_staging, live_jobs
from spark_webdataset.dataset.tree import LEASE_NAME
from spark_webdataset.errors import NotCommitted
from spark_webdataset.spark.options import WriteOptions
from spark_webdataset.spark.writer import WebDatasetWriter
from tests.support.fenced_committer import SCHEMA, commit_samples, keys

HOLD_SECONDS = 60  # a bound, not a wait: the test releases the task as soon as abort() returned


@pytest.fixture(autouse=True)
def no_faults_left():
    yield
    faults.clear()


def batch(prefix: str, start: int, count: int) -> pa.RecordBatch:
    names = [f"{prefix}{i:05d}" for i in range(start, start + count)]
    return pa.record_batch([pa.array(names), pa.array([f"text of {k}" for k in names])], names=["__key__", "txt"])


class HeldTask:
    """One task of `job` in a thread, held at fault point `point` (its `nth` time) until released."""

    def __init__(self, job: WebDatasetWriter, batches: list[pa.RecordBatch], point: str, nth: int = 1) -> None:
        self.held, self.released = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.message = None

        def hold() -> None:
            self.held.set()
            assert self.released.wait(HOLD_SECONDS)

        def arm(remaining: int) -> None:
            faults.install(point, hold if remaining == 1 else lambda: arm(remaining - 1))

        arm(nth)

        def run() -> None:
            try:
                self.message = job.write(iter(batches))
            except BaseException as error:  # noqa: BLE001 - asserted by the test
                self.error = error

        self.thread = threading.Thread(target=run)
        self.thread.start()
        assert self.held.wait(HOLD_SECONDS), f"the task never reached {point}"

    def release(self) -> None:
        self.released.set()
        self.thread.join(HOLD_SECONDS)
        assert not self.thread.is_alive()


def files(directory: Path) -> list[str]:
    return (
        sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()) if directory.exists() else []
    )


def job(uri: str, overwrite: bool = True) -> WebDatasetWriter:
    return WebDatasetWriter(WriteOptions.parse({"path": uri, "maxSamplesPerShard": "5"}), SCHEMA, overwrite)


def test_a_task_staging_its_next_shard_after_the_abort_leaves_nothing_in_a_fresh_directory(tmp_path) -> None:
    """The CI failure: a sibling's second shard (000001.tar) lands after abort() swept."""
    target = tmp_path / "v"
    writer = job(str(target))
    task = HeldTask(writer, [batch("a", 0, 5), batch("a", 5, 5)], "task:batch-written")  # shard 0 staged
    writer.abort([None])  # Spark: another task failed; this one has no message yet
    task.release()  # it goes on: opens its next shard, stages its key run
    assert isinstance(task.error, NotCommitted) and writer.job_id in str(task.error)
    assert not target.exists(), files(target)  # nothing: no staging, no mark, no directory


def test_a_task_whose_last_file_lands_after_the_abort_removes_it_itself(tmp_path) -> None:
    """Held after its check before its last file (the key run): only its check after staging sees the abort."""
    target = tmp_path / "v"
    writer = job(str(target))
    task = HeldTask(writer, [batch("a", 0, 3)], "task:staging-file", nth=2)  # 1: its shard, 2: its key run
    writer.abort([None])
    task.release()
    assert isinstance(task.error, NotCommitted)
    assert not target.exists(), files(target)


def test_an_aborted_job_in_a_committed_version_leaves_only_its_mark_and_the_next_writer_removes_it_at_once(
    tmp_path,
) -> None:
    target = tmp_path / "v"
    commit_samples(str(target), "c", 12)
    committed = (target / "_manifest.json").read_bytes()
    writer = job(str(target), overwrite=False)
    task = HeldTask(writer, [batch("a", 0, 5), batch("a", 5, 5)], "task:batch-written")
    writer.abort([None])
    task.release()
    assert isinstance(task.error, NotCommitted)
    left = files(target / "_staging")
    assert left == [f"{writer.job_id}/{LEASE_NAME}"], left  # no staged byte: the lease, saying aborted
    assert json.loads((target / "_staging" / left[0]).read_text())["aborted"] is True
    assert (target / "_manifest.json").read_bytes() == committed
    assert live_jobs(Version.at(str(target))) == []  # gc and publish see no live job
    commit_samples(str(target), "n", 3)  # the next writer: no wait for a lease to time out
    assert not (target / "_staging").exists()


def test_the_next_writer_removes_an_aborted_jobs_late_files_at_once(tmp_path) -> None:
    """A task killed between staging a file and its check leaves that file: its job's lease says
    aborted, so it is dead staging now, not in ORPHAN_SECONDS."""
    target = tmp_path / "v"
    commit_samples(str(target), "c", 3)
    writer = job(str(target), overwrite=False)
    late = target / "_staging" / writer.job_id / "p00001-a0-t9" / "000000.tar"
    writer.abort([None])
    late.parent.mkdir(parents=True)
    late.write_bytes(b"staged by a task killed before its check")
    version = Version.at(str(target))
    assert clean_dead_staging(version, "next", now=time.time()) == [writer.job_id]
    assert not (target / "_staging").exists()


def test_an_abort_after_every_task_ended_leaves_nothing_in_a_committed_version(tmp_path) -> None:
    """Every task sent its message (the commit failed): no task can stage later, no mark is kept."""
    target = tmp_path / "v"
    commit_samples(str(target), "c", 3)
    writer = job(str(target), overwrite=False)
    message = writer.write(iter([batch("a", 0, 3)]))
    writer.abort([message])
    assert not (target / "_staging").exists()


def test_a_live_tasks_check_passes(tmp_path) -> None:
    target = tmp_path / "v"
    commit_samples(str(target), "c", 3)
    writer = job(str(target), overwrite=False)
    writer.commit([writer.write(iter([batch("a", 0, 7)]))])
    assert (target / "_manifest.json").exists() and not (target / "_staging").exists()
    from spark_webdataset import open as open_version

    assert sorted(open_version(str(target)).keys()) == keys("a", 7) + keys("c", 3)


TASK = """
import pickle, sys
from spark_webdataset.errors import NotCommitted
from tests.integration.test_aborted_staging import batch
writer = pickle.loads(open(sys.argv[1], "rb").read())
try:
    writer.write(iter([batch("a", 0, 5), batch("a", 5, 5)]))
except NotCommitted as error:
    print(f"NotCommitted: {error}")
    sys.exit(3)
"""


def test_a_task_process_held_by_the_faults_file_until_the_driver_aborted_leaves_nothing(tmp_path) -> None:
    """As Spark runs it: the writer pickled to a task process, held at its first file (after its
    check) by the faults file until the driver's abort() returned (`writer:aborted` creates the path)."""
    import pickle
    import subprocess
    import sys

    from tests.support import REPO

    target, aborted = tmp_path / "v", tmp_path / "aborted"
    writer = job(str(target))
    (tmp_path / "writer.pickle").write_bytes(pickle.dumps(writer))
    hold = {
        "task:staging-file": {"action": "wait", "path": str(aborted)},
        "writer:aborted": {"action": "touch", "path": str(aborted)},
    }
    with faults.installed(hold):
        task = subprocess.Popen(
            [sys.executable, "-c", TASK, str(tmp_path / "writer.pickle")], cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + HOLD_SECONDS
        while not Path(f"{aborted}.waiting").exists():  # held: its check passed, nothing staged yet
            assert task.poll() is None and time.monotonic() < deadline, task.communicate()
            time.sleep(0.01)
        writer.abort([None])
        out, err = task.communicate(timeout=HOLD_SECONDS)
    assert aborted.exists()
    assert task.returncode == 3 and writer.job_id in out, (out, err)
    assert not target.exists(), files(target)


def test_on_gcs_a_task_staging_after_the_abort_leaves_only_the_aborted_lease_and_the_next_writer_removes_it(
    bucket,
) -> None:
    uri = f"{bucket}/v"
    commit_samples(uri, "c", 12)
    version = Version.at(uri)
    committed = version.storage.read_bytes(version.manifest_uri)
    writer = job(uri, overwrite=False)
    task = HeldTask(writer, [batch("a", 0, 5), batch("a", 5, 5)], "task:batch-written")
    writer.abort([None])
    task.release()
    assert isinstance(task.error, NotCommitted)
    assert sorted(version.storage.crc32c_below(version.staging_uri)) == [f"{writer.job_id}/{LEASE_NAME}"]
    assert version.storage.read_bytes(version.manifest_uri) == committed
    commit_samples(uri, "n", 3)
    assert version.storage.crc32c_below(version.staging_uri) == {}


def test_on_gcs_a_task_staging_after_the_abort_of_a_fresh_version_leaves_no_object(bucket) -> None:
    uri = f"{bucket}/v"
    writer = job(uri)
    task = HeldTask(writer, [batch("a", 0, 5), batch("a", 5, 5)], "task:batch-written")
    writer.abort([None])
    task.release()
    assert isinstance(task.error, NotCommitted)
    assert Version.at(uri).storage.crc32c_below(uri) == {}
