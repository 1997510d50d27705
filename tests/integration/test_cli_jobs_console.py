"""Jobs end with their answer: `spark-submit jobs/build_webdataset.py` shows Spark's startup lines at
most, then the job's summary or its one `error:` line last (no INFO flood, no "Successfully stopped
SparkContext", no Java stack trace, no PySpark JSON record), and exits by the table in errors.py:
0 done, 2 bad input (an unknown column), 3 a conflict (its commit lock taken over while it was frozen)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_webdataset import fault_points as faults
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.lock import CommitLock
from spark_webdataset.errors import EXIT_BAD_INPUT, EXIT_CONFLICT, EXIT_OK
from tests.support import REPO

KEY = "format_string('%05d', id)"
STARTUP_LINES = 12  # what Spark prints before the job can set the level (JVM notes, version, OS, Java)


def _submit(args: list[str], env: dict | None = None, wait: bool = True):
    """spark-submit of the build job, stdout and stderr in one stream as a console shows them."""
    environment = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        **(env or {}),
    }
    command = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]",
               str(REPO / "jobs" / "build_webdataset.py"), *args]  # fmt: skip
    if not wait:
        return subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(
        command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600
    )


def _lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


@pytest.mark.slow
def test_a_submitted_build_ends_with_its_summary(digits_source, tmp_path) -> None:
    done = _submit(["--source", digits_source, "--output", str(tmp_path / "out"), "--version", "v",
                    "--key", KEY, "--field", "png=image", "--field", "cls=label"])  # fmt: skip
    lines = _lines(done.stdout)
    assert done.returncode == EXIT_OK, done.stdout[-3000:]
    assert lines[-1].startswith("build_webdataset summary: {"), lines[-5:]
    assert "Successfully stopped SparkContext" not in done.stdout
    assert len([line for line in lines if " INFO " in line]) <= STARTUP_LINES, len(lines)


@pytest.mark.slow
def test_an_unknown_column_is_one_line_naming_it_and_the_columns_there(digits_source, tmp_path) -> None:
    done = _submit(["--source", digits_source, "--output", str(tmp_path / "out"), "--version", "v",
                    "--key", KEY, "--field", "png=image", "--field", "cls=nope"])  # fmt: skip
    lines = _lines(done.stdout)
    assert done.returncode == EXIT_BAD_INPUT, done.stdout[-3000:]
    errors = [line for line in lines if "error:" in line]
    assert errors == [lines[-1]], lines[-8:]
    assert lines[-1].startswith("build_webdataset: error: no column `nope` in the source")
    assert all(f"`{column}`" in lines[-1] for column in ("id", "image", "label", "meta")), lines[-1]
    assert "\tat " not in done.stdout and '"ts":' not in done.stdout and "Traceback" not in done.stdout
    assert len(done.stdout) < 4000, len(done.stdout)


def _stopped_descendant(pid: int) -> int | None:
    """A process below `pid` (spark-submit -> java -> python driver) stopped by SIGSTOP, if any."""
    parents, states = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            states[int(entry.name)], parents[int(entry.name)] = fields[0], int(fields[1])
    for candidate, state in states.items():
        ancestor = parents.get(candidate)
        while state == "T" and ancestor not in (None, 0, 1):
            if ancestor == pid:
                return candidate
            ancestor = parents.get(ancestor)
    return None


@pytest.mark.slow
def test_a_job_whose_commit_lock_was_taken_over_exits_3(digits_source, tmp_path) -> None:
    """The driver freezes after its commit planned (a GC pause, a stopped VM), its 1 s lease runs out,
    another committer takes the lock: resumed, the job's commit is refused, and a retry may succeed."""
    root = tmp_path / "out"
    job = _submit(["--source", digits_source, "--output", str(root), "--version", "v", "--key", KEY,
                   "--field", "png=image", "--write-option", "commitLeaseSeconds=1"],
                  env={faults.ENV: "commit:planned=stop"}, wait=False)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while (driver := _stopped_descendant(job.pid)) is None:
            assert job.poll() is None, job.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the driver never reached commit:planned"
            time.sleep(0.2)
        time.sleep(1.5)  # its lease (1 s) runs out: the lock may be taken over
        with CommitLock(Dataset(str(root)).version("v"), "another-committer", wait_seconds=30):
            pass
        os.kill(driver, signal.SIGCONT)
        output, _ = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
    lines = _lines(output)
    assert job.returncode == EXIT_CONFLICT, output[-3000:]
    assert lines[-1].startswith("build_webdataset: error: ") and "commit lock" in lines[-1], lines[-5:]
