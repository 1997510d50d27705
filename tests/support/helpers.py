"""Shared test helpers: what a written version must look like on disk, a reference tar, the CLI and
the build job in processes of their own, stopping process groups, counting Spark's failed tasks."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import google_crc32c

from tests.support import REPO


def manifest(directory: str | Path) -> dict:
    return json.loads((Path(directory) / "_manifest.json").read_text())


def crc32c_text(data: bytes) -> str:
    """crc32c as GCS reports it: base64 of the big-endian value (computed here by google_crc32c)."""
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode()


def shard_paths(directory: str | Path) -> list[Path]:
    return sorted(Path(directory).glob("shard-*.tar"))


def assert_version_consistent(
    directory: str | Path, max_shard_bytes: int | None = None, live_stream: bool = False
) -> dict:
    """Manifest and files agree; names contiguous; caps held; nothing staged is left (but the
    lease of a stream's query, `live_stream`: it stays until a later writer finds its driver gone)."""
    document = manifest(directory)
    paths = shard_paths(directory)
    assert [p.name for p in paths] == [f"shard-{i:06d}.tar" for i in range(len(paths))]
    assert [s["name"] for s in document["shards"]] == [p.name for p in paths]
    for entry, path in zip(document["shards"], paths):
        data = path.read_bytes()
        assert entry["bytes"] == len(data)
        assert entry["crc32c"] == crc32c_text(data)
        if "sha256" in entry:  # written with checksum=sha256
            assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        if max_shard_bytes is not None and entry["samples"] > 1:
            assert len(data) <= max_shard_bytes, f"{path.name} is {len(data)} bytes"
    assert document["samples"] == sum(s["samples"] for s in document["shards"])
    staging = Path(directory) / "_staging"
    if live_stream:
        assert {p.name for p in staging.rglob("*") if p.is_file()} <= {"_lease.json"}
    else:
        assert not staging.exists()
    return document


def tar_by_tarfile(members: list[tuple[str, bytes]], form: int = tarfile.USTAR_FORMAT) -> bytes:
    """A tar written by Python's tarfile: the reference other tools' shards look like."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=form) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m spark_webdataset.cli *args` in a process of its own, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "spark_webdataset.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def run_python(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """A fresh interpreter (its own Spark driver when the code starts one), output captured."""
    env = {
        **os.environ,
        "SPARK_MASTER": "local[1]",
        "PYTHONUNBUFFERED": "1",
        "PYSPARK_SUBMIT_ARGS": "--conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false "
        "--conf spark.sql.shuffle.partitions=2 pyspark-shell",
    }
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def spark_submit(
    args: list[str],
    master: str = "local[2]",
    env: dict[str, str] | None = None,
    wait: bool = True,
    timeout: float = 300,
):
    """jobs/build_webdataset.py through spark-submit (this venv's): its CompletedProcess, or with
    `wait=False` the running Popen (a process group of its own, output discarded)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, **(env or {})}
    command = [str(Path(sys.executable).parent / "spark-submit"), "--master", master,
               str(REPO / "jobs" / "build_webdataset.py"), *args]  # fmt: skip
    if not wait:
        return subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


TEXT_MTIME = 1_700_000_000  # not the default 0


def text_v1(root: Path) -> Path:
    """The version write_text_version wrote under a root (the text_root fixture's)."""
    return Path(root) / "versions" / "v1"


def write_text_version(spark, target: str | Path) -> None:
    """120 samples k000..k119 in 3 shards of 40, `txt` missing where id % 7 == 3, written with mtime=TEXT_MTIME."""
    (
        spark.range(120)
        .selectExpr(
            "format_string('k%03d', id) AS __key__",
            "CASE WHEN id % 7 = 3 THEN NULL ELSE concat('text ', id) END AS txt",
            "CAST(id % 10 AS INT) AS cls",
        )
        .coalesce(1)
        .write.format("webdataset")
        .option("maxSamplesPerShard", "40")
        .option("mtime", str(TEXT_MTIME))
        .mode("overwrite")
        .save(str(target))
    )


def snapshot_files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory below `folder` with its size and mtime: what 'nothing written' compares."""
    if not folder.exists():
        return {}
    return {
        str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
    }


def unmeasured(env: dict[str, str]) -> dict[str, str]:
    """`env` for a long-lived Airflow service that coverage must not trace: its scheduler and API loops
    cost the suite more under the tracer than the lines of ours they run, which in-process tests
    measure already (coverage's subprocess patch passes COVERAGE_PROCESS_CONFIG down)."""
    return {name: value for name, value in env.items() if name != "COVERAGE_PROCESS_CONFIG"}


def stop_groups(processes: list[subprocess.Popen], seconds: float = 5) -> None:
    """TERM the process groups these processes lead (Airflow services, airflow standalone), then
    KILL the groups still there after `seconds`."""

    def signal_all(sig: int) -> bool:
        left = False
        for process in processes:
            try:
                os.killpg(process.pid, sig)
                left = True
            except ProcessLookupError:
                pass
        return left

    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for process in processes:
            process.poll()  # reap the leaders, so an empty group reads as gone
        if not signal_all(0):
            return
        time.sleep(0.5)
    signal_all(signal.SIGKILL)
    for process in processes:
        process.wait(timeout=30)


@contextlib.contextmanager
def _job_group(spark) -> Iterator[tuple[str, object]]:
    """A job group of its own for the actions run inside, and Spark's status tracker to follow its jobs."""
    import uuid

    context = spark.sparkContext
    group = f"test-{uuid.uuid4().hex}"
    properties = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
    previous = {name: context.getLocalProperty(name) for name in properties}
    context.setJobGroup(group, "test: follow the jobs of an action")
    try:
        yield group, context.statusTracker()
    finally:
        for name, value in previous.items():
            context.setLocalProperty(name, value)  # None removes it


def _wait_for(tracker, group: str, timeout: float, tasks_too: bool) -> list:
    """The group's jobs once each has ended in Spark's status store (and, `tasks_too`, each of their tasks)."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = [tracker.getJobInfo(job) for job in tracker.getJobIdsForGroup(group)]
        stages = [tracker.getStageInfo(stage) for job in jobs if job is not None for stage in job.stageIds]
        ended = bool(jobs) and all(job is not None and job.status in ("SUCCEEDED", "FAILED") for job in jobs)
        if ended and (not tasks_too or all(stage is None or stage.numActiveTasks == 0 for stage in stages)):
            return jobs
        assert time.monotonic() < deadline, f"the jobs of {group} did not end in Spark's status store: {jobs}"
        time.sleep(0.05)


def failed_task_attempts(spark, action: Callable[[], object], timeout: float = 60) -> int:
    """Run `action` (a Spark action) in a job group of its own and return how many task attempts
    of its jobs failed, as Spark's status store counts them (it runs with spark.ui.enabled=false).

    The count comes from the scheduler, not from the code under test: a test of a retried task
    asserts it, so the test fails if no first attempt failed. The status listener runs after the
    action returns: wait until it has seen every job of the group end.
    """
    with _job_group(spark) as (group, tracker):
        action()
    jobs = _wait_for(tracker, group, timeout, tasks_too=False)
    stages = [tracker.getStageInfo(stage) for job in jobs for stage in job.stageIds]
    assert all(stage is not None for stage in stages), stages
    return sum(stage.numFailedTasks for stage in stages)


def _publish_in_process(args: tuple[str, str, object]) -> str:
    from spark_webdataset.dataset.publish import publish

    root, name, barrier = args
    barrier.wait()
    result = publish(root, name)
    return "noop" if result.already_published else "won"


def publish_race(root: str | Path, versions: list[str]) -> list[str]:
    """Publish `versions` of `root` at once, one process each (spawned, all released by one barrier):
    "won" or "noop" (found already published) per version."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(len(versions))
        with context.Pool(len(versions)) as pool:
            return pool.map(_publish_in_process, [(str(root), v, barrier) for v in versions])


def run_until_every_task_ended(spark, action: Callable[[], object], timeout: float = 120) -> None:
    """Run `action` (a Spark action, which may raise) in a job group of its own, then wait until every
    task of its jobs has ended, as Spark's status store counts them: a failed job's `save()` raises
    while sibling tasks still run (Spark does not wait for them before `abort()`), and what such a
    task leaves is only final once it ended."""
    with _job_group(spark) as (group, tracker):
        try:
            action()
        finally:
            _wait_for(tracker, group, timeout, tasks_too=True)


def write(df, uri: str, mode: str = "overwrite", **options) -> None:
    """`df.write.format("webdataset")` with these options and mode, saved at `uri`."""
    writer = df.write.format("webdataset").mode(mode)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save(uri)


def raised(call) -> Exception:
    """The typed error of ours behind whatever `call` raised (Spark wraps driver and task errors)."""
    import pytest

    from spark_webdataset.errors import from_spark

    with pytest.raises(Exception) as failure:
        call()
    error = from_spark(failure.value)
    assert error is not None, f"not one of our errors: {failure.value}"
    return error
