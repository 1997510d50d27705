"""The CLI behaves like the Unix tools users know: `--version`, `--help` on every command, quiet on a
closed pipe (`spark-webdataset inspect ROOT | head -1`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spark_webdataset.cli import parser
from tests.support.helpers import run_cli
from tests.support.webdataset_ui_data import published_digits


def test_version_names_the_installed_distribution() -> None:
    from importlib.metadata import version

    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"spark-webdataset {version('spark-webdataset')}"


def test_every_command_has_help() -> None:
    commands = parser()._subparsers._group_actions[0].choices  # argparse keeps them there
    assert {"validate", "publish", "inspect", "gc", "get", "cat", "datasets"} <= set(commands)
    for name in commands:
        result = run_cli(name, "--help")
        assert result.returncode == 0 and result.stdout.startswith("usage: "), name


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    root = tmp_path / "digits"
    published_digits(root)
    for args in (["inspect", str(root)], ["get", str(root), "00001"]):
        process = subprocess.Popen(
            [sys.executable, "-m", "spark_webdataset.cli", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        process.stdout.close()  # closed before the child wrote a byte: its first write meets EPIPE
        _, stderr = process.communicate(timeout=120)
        assert b"Traceback" not in stderr and b"BrokenPipeError" not in stderr, (args, stderr.decode())
        assert process.returncode == 141, (args, process.returncode)


def test_inspect_names_pins_and_a_missing_latest(tmp_path: Path) -> None:
    import json

    root = tmp_path / "digits"
    published_digits(root, "20261201T000000Z")
    assert run_cli("pin", str(root), "20261201T000000Z").returncode == 0
    shown = run_cli("inspect", str(root))
    assert shown.returncode == 0
    line = next(line for line in shown.stdout.splitlines()[1:] if "20261201T000000Z" in line)
    assert "pinned" in line
    assert json.loads(run_cli("inspect", str(root), "--json").stdout)["pinned"] == ["20261201T000000Z"]
    (root / "LATEST").unlink()  # a root whose LATEST is gone (or was never written) says so in words
    assert "LATEST=none" in run_cli("inspect", str(root)).stdout.splitlines()[0]


def test_cat_of_a_path_no_file_system_takes_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    for path in (tmp_path / ("x" * 300), tmp_path):  # a name too long; a directory
        result = run_cli("cat", str(path))
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith("spark-webdataset cat: error: "), result.stderr


def test_datasets_reads_the_folder_its_help_names(tmp_path: Path) -> None:
    """No --folder, no SPARK_WEBDATASET_DATASETS: datasets/ in the working directory, not Airflow's home."""
    from tests.support.webdataset_ui_data import write_digits_config

    write_digits_config(tmp_path / "datasets", "here", tmp_path / "root")
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_WEBDATASET_DATASETS", "AIRFLOW__CORE__DAGS_FOLDER")}
    result = run_cli("datasets", "--json", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert [config["name"] for config in __import__("json").loads(result.stdout)] == ["here"]


def test_validate_and_inspect_of_nothing_are_both_bad_input(tmp_path: Path) -> None:
    for command in ("validate", "inspect"):
        result = run_cli(command, str(tmp_path / "nothing"))
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert result.stderr.startswith(f"spark-webdataset {command}: error: ") and "Traceback" not in result.stderr
