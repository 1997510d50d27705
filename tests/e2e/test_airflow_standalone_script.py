"""scripts/airflow_standalone.sh: the execution API URL follows the API's port, nothing lands in the
checkout, and stopping the script stops every process it started, task process groups included.

The script's arguments run instead of `airflow standalone` (same environment, same session), so
these runs take seconds, not a standalone's cold start: Airflow's own config reader reports the
URL, and a stand-in for a stuck Airflow forks "tasks" the way Airflow's supervisor starts them
(each in a process group of its own) that ignore TERM, with children of their own. The real
`airflow standalone` runs in tests/e2e/test_webdataset_view_browser.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.gcs_emulator import free_port
from tests.support.helpers import stop_groups, unmeasured

SCRIPT = REPO / "scripts" / "airflow_standalone.sh"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# Stands in for `airflow standalone`: three hung "tasks", each a process group of its own (as
# Airflow's task supervisor makes them) that ignores TERM and has a child; it writes their pids,
# then waits (TERM ends it: it is not the one that hangs).
HUNG_AIRFLOW = """
import os, signal, sys, time

pids = []
for _ in range(3):
    read, write = os.pipe()
    task = os.fork()
    if task == 0:
        os.setpgid(0, 0)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = os.fork()
        if child == 0:
            while True:
                time.sleep(60)
        os.write(write, f"{child}".encode())
        while True:
            time.sleep(60)
    os.close(write)
    pids += [task, int(os.read(read, 64))]
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(" ".join(map(str, pids)))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(60)
"""


def _env(tmp_path: Path, **overrides: str) -> dict:
    """A temp Airflow home and data, no dataset configs (no demo source to make); the API settings
    of the developer's shell removed, the given ones set. The home starts with the session's
    migrated database, so the script's migrate finds nothing to do."""
    (tmp_path / "datasets").mkdir(exist_ok=True)
    home = tmp_path / "airflow_home"
    home.mkdir(exist_ok=True)
    shutil.copyfile(Path(os.environ["AIRFLOW_HOME"]) / "airflow.db", home / "airflow.db")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW__API__", "AIRFLOW__CORE__EXECUTION_API", "AIRFLOW__DATABASE__"))
    }
    env.update(
        AIRFLOW_HOME=str(tmp_path / "airflow_home"),
        SPARK_WEBDATASET_DATA=str(tmp_path / "data"),
        SPARK_WEBDATASET_DATASETS=str(tmp_path / "datasets"),
        **overrides,
    )
    return unmeasured(env)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, session) of a live process; None if it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state, _, pgid, sid = text.rsplit(")", 1)[1].split()[:4]
    return None if state in ("Z", "X") else (state, int(pgid), int(sid))


def _session(sid: int) -> list[int]:
    """Live processes of a session."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return [pid for pid in pids if (stat := _stat(pid)) is not None and stat[2] == sid]


def _checkout_outputs() -> dict:
    """What the script used to write into the checkout (dist/), as it is now."""
    return {p: p.stat().st_mtime_ns for p in (REPO / "dist").glob("*")} if (REPO / "dist").exists() else {}


def test_the_url_follows_the_port_and_stopping_the_script_stops_every_task_group(tmp_path, airflow_db) -> None:
    port = free_port()
    env = _env(tmp_path, AIRFLOW__API__PORT=str(port), SPARK_WEBDATASET_STOP_SECONDS="2")
    hung = tmp_path / "hung_airflow.py"
    hung.write_text(HUNG_AIRFLOW)
    pids_file, url_file = tmp_path / "pids", tmp_path / "url"
    command = (
        f"airflow config get-value core execution_api_server_url > {url_file} && "
        f"exec {sys.executable} {hung} {pids_file}"
    )
    before = _checkout_outputs()
    log = tmp_path / "script.log"
    with open(log, "wb") as out:  # a group of its own: the fallback below can stop the script itself
        script = subprocess.Popen(
            [str(SCRIPT), "sh", "-c", command], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 120
        while not pids_file.exists():
            assert script.poll() is None, f"the script exited with {script.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no tasks started:\n{log.read_text()}"
            time.sleep(0.2)
        tasks = [int(pid) for pid in pids_file.read_text().split()]
        # Airflow's own config reader sees the URL of the API's port (its default host 0.0.0.0: localhost)
        assert url_file.read_text().strip() == f"http://localhost:{port}/execution/"
        # the tasks and their children: in the command's session, in process groups not its own
        stats = {pid: _stat(pid) for pid in tasks}
        assert all(stats.values()), stats
        sessions = {sid for _, _, sid in stats.values()}
        assert len(sessions) == 1 and (leader := sessions.pop()) != script.pid
        assert {pgid for _, pgid, _ in stats.values()}.isdisjoint({leader, script.pid})
        assert sorted(_session(leader)) == sorted([leader, *tasks])

        started = time.monotonic()
        script.send_signal(signal.SIGTERM)  # the script alone, as `kill PID` or a service manager would
        assert script.wait(timeout=60) == 143, log.read_text()
        assert time.monotonic() - started < 20  # TERM, 2 s of grace, KILL
        assert {pid: _stat(pid) for pid in tasks if _stat(pid) is not None} == {}
        assert _session(leader) == []
        assert "still running" not in log.read_text()
    finally:
        if script.poll() is None:
            stop_groups([script])
    # the package zip went to the Airflow home; nothing was written into the checkout
    assert (tmp_path / "airflow_home" / "spark_webdataset.zip").stat().st_size > 0
    assert _checkout_outputs() == before


@pytest.mark.parametrize(
    "settings, expected",
    [
        (  # an IPv6 host in brackets; the base URL's path is where the api-server serves
            {
                "AIRFLOW__API__HOST": "::1",
                "AIRFLOW__API__PORT": "18123",
                "AIRFLOW__API__BASE_URL": "https://a.example/air/",
            },
            "http://[::1]:18123/air/execution/",
        ),
        (  # a URL given is kept
            {
                "AIRFLOW__API__PORT": "18123",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "http://api.internal:9/execution/",
            },
            "http://api.internal:9/execution/",
        ),
    ],
    ids=["ipv6-and-base-path", "given-url-kept"],
)
def test_the_execution_api_url_is_derived_unless_given(tmp_path, airflow_db, settings, expected) -> None:
    run = subprocess.run(
        [str(SCRIPT), "printenv", "AIRFLOW__CORE__EXECUTION_API_SERVER_URL"],
        env=_env(tmp_path, **settings), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (run.returncode, run.stdout.strip()) == (0, expected), run.stderr
