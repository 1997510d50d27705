"""The compose stack's Airflow, run natively: docker-compose.yaml's own commands and environment.

A private PostgreSQL cluster (Debian's package) on 127.0.0.1 stands in for the postgres service;
airflow-init's script migrates it; api-server, scheduler (LocalExecutor), dag-processor and
triggerer start, each with its own AIRFLOW_HOME as in its own container (so the shared JWT
secret is needed for real). webdataset__digits (the repository's config, manual schedule) is
triggered through the REST API and must publish; its Asset event must run the example consumer
DAG; every service's healthcheck must pass. Spark is local[2] here (tests/e2e/test_cluster.py runs
the DAG on a standalone cluster).
Skipped, with the reason, where PostgreSQL is not installed (scripts/ensure_postgres.sh).
"""

from __future__ import annotations

import datetime
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support import compose_stack
from tests.support.gcs_emulator import free_ports
from tests.support.helpers import stop_groups, unmeasured

REPO = compose_stack.REPO
DAG_ID = "webdataset__digits"
LOGICAL_DATE = datetime.datetime(2026, 11, 9, tzinfo=datetime.timezone.utc)
VERSION = "20261109T000000Z"
SERVERS = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")


def _postgres_bin() -> Path | None:
    """The newest /usr/lib/postgresql/<major>/bin (Debian), else the directory of initdb on PATH."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    initdb = found[-1] if found else (Path(shutil.which("initdb")) if shutil.which("initdb") else None)
    return initdb.parent if initdb else None


PG_BIN = _postgres_bin()
AS_ROOT = os.geteuid() == 0

pytestmark = [
    pytest.mark.skipif(
        PG_BIN is None,
        reason="PostgreSQL is not installed (scripts/ensure_postgres.sh: apt-get install postgresql)",
    ),
    pytest.mark.slow,
    pytest.mark.timeout(420),
]


@pytest.fixture
def postgres():
    """A private cluster on a free port: user, password and database airflow (the compose service's)."""
    if AS_ROOT:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no postgres user to run the server as")
    root = Path(tempfile.mkdtemp(prefix="airflow-postgres-"))  # not tmp_path: the postgres user must reach it
    (root / "password").write_text("airflow\n")
    if AS_ROOT:
        for path in (root, root / "password"):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    as_owner = ["runuser", "-u", "postgres", "--"] if AS_ROOT else []
    [port] = free_ports(1)

    def pg(*argv: str) -> None:
        done = subprocess.run(
            as_owner + [str(PG_BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{argv[0]}: {done.stdout[-2000:]}{done.stderr[-2000:]}"

    data = root / "data"
    pg("initdb", "-D", str(data), "-U", "airflow", f"--pwfile={root / 'password'}", "--auth=scram-sha-256",
       "-E", "UTF8", "--no-sync")  # fmt: skip
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
    try:
        pg("pg_ctl", "-D", str(data), "-o", options, "-l", str(root / "server.log"), "-w", "start")
        subprocess.run(
            [str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "airflow", "airflow"],
            env={**os.environ, "PGPASSWORD": "airflow"}, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        yield port
    finally:
        subprocess.run(
            as_owner + [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


def _native_env(name: str, service: dict, addresses: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The service's compose environment on this machine; none of the caller's Airflow settings leak in."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SPARK_WEBDATASET_", "STORAGE_EMULATOR"))
    }
    stack = compose_stack.environment(service)
    env.update({key: compose_stack.native(value, addresses) for key, value in stack.items()})
    here = {
        "AIRFLOW_HOME": str(tmp_path / "homes" / name),  # one per container: nothing shared but the database
        "SPARK_WEBDATASET_DATA": str(tmp_path / "data"),
        "SPARK_WEBDATASET_DATASETS": str(tmp_path / "datasets"),  # the repo's digits, manual schedule
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    if "SPARK_LOCAL_HOSTNAME" in stack:  # the container's name, for executors to call the driver back
        here["SPARK_LOCAL_HOSTNAME"] = "127.0.0.1"
    assert set(here) <= set(stack), f"{name}: the native run replaces settings the stack does not have"
    env.update(here)
    env.pop("STORAGE_EMULATOR_HOST")  # no gs:// root in this run, no emulator
    env.pop("AWS_ENDPOINT_URL")  # no s3:// root either: the stack's `s3` service does not run here
    # ports the containers have to themselves
    env.update(
        AIRFLOW__API__HOST="127.0.0.1",
        AIRFLOW__API__PORT=addresses["localhost:8080"].split(":")[1],
        AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT=addresses["localhost:8974"].split(":")[1],
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    return unmeasured(env)


class Stack:
    """The Airflow services of docker-compose.yaml as native processes on free ports."""

    def __init__(self, tmp_path: Path, postgres_port: int) -> None:
        api, health = free_ports(2)
        self.addresses = {
            "postgres:5432": f"127.0.0.1:{postgres_port}",
            "airflow-apiserver:8080": f"127.0.0.1:{api}",
            "localhost:8080": f"127.0.0.1:{api}",
            "localhost:8974": f"127.0.0.1:{health}",
        }
        self.base = f"http://127.0.0.1:{api}"
        self.services = compose_stack.services()
        self.env = {
            name: _native_env(name, self.services[name], self.addresses, tmp_path)
            for name in compose_stack.AIRFLOW_SERVICES
        }
        self.logs = tmp_path / "logs"
        self.logs.mkdir()
        self.processes: dict[str, subprocess.Popen] = {}

    def command(self, name: str) -> list[str]:
        argv = [compose_stack.native(part, self.addresses) for part in self.services[name]["command"]]
        return [str(REPO / argv[0])] + argv[1:] if argv[0].startswith("scripts/") else argv

    def run(self, name: str, timeout: float) -> None:
        done = subprocess.run(
            self.command(name), env=self.env[name], cwd=REPO, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    def start(self, name: str) -> None:
        with open(self.logs / f"{name}.log", "wb") as out:
            self.processes[name] = subprocess.Popen(
                self.command(name),
                env=self.env[name],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def healthcheck(self, name: str) -> subprocess.Popen:
        argv = [compose_stack.native(part, self.addresses) for part in compose_stack.healthcheck(self.services[name])]
        return subprocess.Popen(argv, env=self.env[name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                pytest.fail(f"{name} exited with {process.returncode}:\n{self.tail(name)}")

    def tail(self, name: str, size: int = 3000) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-size:]

    def task_logs(self) -> str:
        """Each task attempt's log (the scheduler's LocalExecutor writes them): its errors and last lines."""
        home = Path(self.env["airflow-scheduler"]["AIRFLOW_HOME"]) / "logs"
        parts = []
        for path in sorted(home.glob("dag_id=*/**/attempt=*.log")):
            events = []
            for line in path.read_text(errors="replace").splitlines():
                try:
                    events.append(json.loads(line))
                except ValueError:
                    events.append({"event": line})
            errors = [
                e for e in events if e.get("level") in ("error", "critical") or "Exception" in str(e.get("event"))
            ]
            shown = [
                str(e.get("event"))[:300] + str(e.get("error_detail", ""))[:1500] for e in errors[-5:] + events[-15:]
            ]
            parts.append(f"== {path.relative_to(home)}\n" + "\n".join(shown))
        return "\n".join(parts)

    def stop(self) -> None:
        stop_groups(list(self.processes.values()))


@pytest.fixture
def stack(postgres, tmp_path):
    digits = yaml.safe_load((REPO / "datasets" / "digits.yaml").read_text())
    assert digits["name"] == "digits" and digits["schedule"]
    (tmp_path / "datasets").mkdir()
    # the repository's config, run on demand only: the scheduler must not start its own run too
    (tmp_path / "datasets" / "digits.yaml").write_text(yaml.safe_dump({**digits, "schedule": None}, sort_keys=False))
    stack = Stack(tmp_path, postgres)
    try:
        yield stack
    finally:
        stack.stop()


def _call(stack: Stack, method: str, path: str, token: str | None = None, body: dict | None = None) -> dict:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(stack.base + path, data=data, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


def _until(stack: Stack, what: str, seconds: float, check):
    """check()'s first truthy answer, polled every 2 s while the services live; fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        stack.alive()
        try:
            answer = check()
        except (OSError, urllib.error.HTTPError):
            answer = None
        if answer:
            return answer
        time.sleep(2)
    logs = "\n".join(f"== {name}\n{stack.tail(name, 1500)}" for name in stack.processes)
    pytest.fail(f"{what}: nothing after {seconds} s\n{logs}")


def _succeeds(stack: Stack, token: str, dag_id: str, run_id: str) -> None:
    """Wait for the run to succeed; fail, with the task logs, on a task that failed or waits for a retry."""
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"

    def ended() -> str | None:
        tasks = _call(stack, "GET", f"{path}/taskInstances", token)["task_instances"]
        failed = [
            f"{t['task_id']}: {t['state']}"
            for t in tasks
            if t["state"] in ("failed", "up_for_retry", "upstream_failed")
        ]
        state = _call(stack, "GET", path, token)["state"]
        return "; ".join(failed) or (state if state in ("success", "failed") else None)

    state = _until(stack, f"the end of {dag_id}'s run", 300, ended)
    assert state == "success", f"{dag_id}: {state}\n{stack.task_logs()[-10000:]}"


def test_the_compose_services_run_the_digits_dag_on_postgres(stack) -> None:
    stack.run("airflow-init", timeout=300)  # airflow db migrate, and the demo's source
    for name in SERVERS:
        stack.start(name)
    _until(
        stack,
        "api-server health",
        150,
        lambda: _call(stack, "GET", "/api/v2/monitor/health")["metadatabase"]["status"] == "healthy",
    )

    # a script's login: the simple auth manager's generated admin password for a token
    passwords = Path(stack.env["airflow-apiserver"]["AIRFLOW_HOME"]) / "simple_auth_manager_passwords.json.generated"
    login = {"username": "admin", "password": json.loads(passwords.read_text())["admin"]}
    token = _call(stack, "POST", "/auth/token", body=login)["access_token"]
    _until(
        stack,
        f"{DAG_ID} parsed by the dag-processor",
        150,
        lambda: _call(stack, "GET", f"/api/v2/dags/{DAG_ID}", token),
    )
    run = _call(stack, "POST", f"/api/v2/dags/{DAG_ID}/dagRuns", token, {"logical_date": LOGICAL_DATE.isoformat()})
    # meanwhile: every service's own healthcheck must pass
    checks = {name: stack.healthcheck(name) for name in SERVERS}

    _succeeds(stack, token, DAG_ID, run["dag_run_id"])
    root = stack.env["airflow-scheduler"]["SPARK_WEBDATASET_DATA"] + "/datasets/digits"
    assert (Path(root) / "LATEST").read_text().strip() == VERSION
    manifest = json.loads((Path(root) / "versions" / VERSION / "_manifest.json").read_text())
    assert manifest["samples"] == 1797
    # the publish task's Asset event, stored in Postgres, as the API hands it to a reader
    events = _call(stack, "GET", f"/api/v2/assets/events?source_dag_id={DAG_ID}", token)["asset_events"]
    assert [(e["source_task_id"], e["extra"]["version"], e["extra"]["samples"]) for e in events] == [
        ("publish", VERSION, 1797)
    ]

    # the Asset event starts the example consumer DAG, which reads the version it names and LATEST
    consumer = "consume_webdataset"
    [started] = _until(
        stack,
        "the consumer's run",
        120,
        lambda: _call(stack, "GET", f"/api/v2/dags/{consumer}/dagRuns", token)["dag_runs"],
    )
    assert started["run_type"] == "asset_triggered"
    _succeeds(stack, token, consumer, started["dag_run_id"])
    task = f"/api/v2/dags/{consumer}/dagRuns/{started['dag_run_id']}/taskInstances/read_latest_version"
    xcom = f"{task}/xcomEntries/return_value"
    assert _call(stack, "GET", xcom, token)["value"] == [{"version": VERSION, "samples": 1797}]

    for name, check in checks.items():
        output, _ = check.communicate(timeout=120)
        assert check.returncode == 0, f"{name}'s healthcheck failed: {output[-2000:]}"
