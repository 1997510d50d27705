"""docker-compose.yaml as data: its services, their commands, environment and healthchecks.

No Docker engine runs here: tests/e2e/test_airflow_postgres.py runs these commands natively
(`native` maps the stack's hosts, ports and paths to this machine's), and
tests/unit/repo/test_compose_consistency.py checks the file against the scripts.
"""

from __future__ import annotations

import yaml

from tests.support import REPO

COMPOSE_FILE = REPO / "docker-compose.yaml"
IMAGE_REPO = "/opt/spark-webdataset"  # the Dockerfile's WORKDIR: its copy of this repository
AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)


def services() -> dict[str, dict]:
    return yaml.safe_load(COMPOSE_FILE.read_text())["services"]


def environment(service: dict) -> dict[str, str]:
    """A service's environment as strings (compose allows a mapping or KEY=VALUE items)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {name: str(value) for name, value in env.items()}


def healthcheck(service: dict) -> list[str]:
    """The healthcheck as an argv ("CMD-SHELL" runs its string with sh -c, as Docker does)."""
    kind, *rest = service["healthcheck"]["test"]
    return ["sh", "-c", rest[0]] if kind == "CMD-SHELL" else rest


def native(value: str, addresses: dict[str, str]) -> str:
    """`value` with the stack's host:port names replaced (addresses) and the image's repository path
    replaced by this checkout."""
    for stack, here in addresses.items():
        value = value.replace(stack, here)
    return value.replace(IMAGE_REPO, str(REPO))
