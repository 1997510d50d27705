"""The CLI behaves like the Unix tools users know: `--version`, `--help` on every command, `--json` on
every command that answers (the shapes docs/cli.md documents), quiet on a closed pipe
(`spark-webdataset inspect ROOT | head -1`), and the exit codes of docs/cli.md's one table, each
provoked for real (3, a conflict: publish with `--lock-wait` while a commit holds the version's
lock; the build job's 3, its lock taken over, is in tests/integration/test_cli_jobs_console.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from spark_webdataset import errors
from spark_webdataset.cli import parser
from tests.support import REPO
from tests.support.helpers import run_cli
from tests.support.webdataset_ui_data import commit_table, digits_table, published_digits, write_digits_config

FIRST, SECOND = "20261201T000000Z", "20261202T000000Z"
REPORTING = {"validate", "publish", "latest", "inspect", "gc", "pin", "unpin", "datasets", "get", "demo-source"}


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
    write_digits_config(tmp_path / "datasets", "here", root)
    for args in (["inspect", str(root)], ["get", str(root), "00001"], ["gc", str(root), "--keep-last", "1", "--dry-run", "--json"],
                 ["datasets", "--folder", str(tmp_path / "datasets"), "--json"], ["latest", str(root)]):  # fmt: skip
        process = subprocess.Popen(
            [sys.executable, "-m", "spark_webdataset.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
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
    for path in (tmp_path / ("x" * 300), tmp_path):  # a name too long; a directory: storage has no answer
        result = run_cli("cat", str(path))
        assert result.returncode == errors.EXIT_NO_ANSWER and "Traceback" not in result.stderr, result.stderr
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


def _documented_json_keys() -> dict[str, tuple[set[str], str]]:
    """docs/cli.md's JSON table: command -> (its keys, the notes)."""
    text = (REPO / "docs" / "cli.md").read_text()
    table = text[text.index("| command | keys | notes |") :].split("\n\n", 1)[0]
    documented = {}
    for row in table.splitlines()[2:]:
        commands, keys, notes = (cell.strip() for cell in row.strip("|").split(" | "))
        for command in re.findall(r"`([\w-]+)`", commands):
            documented[command] = (set(re.findall(r"`(\w+)`", keys)), notes)
    return documented


def _json(*args: str) -> dict | list:
    result = run_cli(*args)
    assert result.returncode == 0 and "Traceback" not in result.stderr, (args, result.stderr)
    return json.loads(result.stdout)


def test_every_command_that_answers_takes_json_in_the_documented_shape(tmp_path: Path) -> None:
    commands = set(parser()._subparsers._group_actions[0].choices)
    documented = _documented_json_keys()
    assert set(documented) == REPORTING == commands - {"cat"}  # cat streams bytes: nothing to describe
    root = tmp_path / "digits"
    published_digits(root, FIRST)
    commit_table(root, SECOND, digits_table())
    write_digits_config(tmp_path / "datasets", "here", root)
    answers = {
        "demo-source": _json("demo-source", str(tmp_path / "source"), "--files", "1", "--json"),
        "validate": _json("validate", str(root / "versions" / SECOND), "--quiet", "--workers", "1", "--json"),
        "publish": _json("publish", str(root), SECOND, "--json"),
        "latest": _json("latest", str(root), "--set", FIRST, "--json"),
        "pin": _json("pin", str(root), FIRST, "--json"),
        "inspect": _json("inspect", str(root), "--keep-last", "1", "--min-age", "0", "--json"),
        "unpin": _json("unpin", str(root), FIRST, "--json"),
        "gc": _json("gc", str(root), "--keep-last", "1", "--min-age", "0", "--dry-run", "--json"),
        "get": _json("get", str(root), "00007", "--json"),
        "datasets": _json("datasets", "--folder", str(tmp_path / "datasets"), "--json")[0],
    }
    for command, answer in answers.items():
        keys, _ = documented[command]
        if command == "datasets":  # the documented ones, and every field of the config
            assert keys <= set(answer), (command, keys - set(answer))
        else:
            assert set(answer) == keys, (command, set(answer) ^ keys)
    assert answers["demo-source"]["rows"] == 1797 and answers["validate"]["ok"] is True
    assert (answers["publish"]["version"], answers["publish"]["already_published"]) == (SECOND, False)
    assert answers["latest"] == {"latest": FIRST, "previous": SECOND, "by": answers["latest"]["by"]}
    assert answers["inspect"]["pinned"] == [FIRST] and answers["unpin"]["changed"] is True
    assert answers["gc"]["dry_run"] is True and answers["gc"]["kept"][FIRST] == ["latest"]
    assert answers["get"]["key"] == "00007" and set(answers["get"]["fields"]) == {"png", "cls", "json"}
    assert _json("latest", str(root), "--json") == {"latest": FIRST}  # without --set, as the notes say
    assert "only `latest`" in documented["latest"][1]


def _documented_exit_codes() -> dict[int, set[str]]:
    """docs/cli.md's exit-code table: code -> the error classes its row names."""
    text = (REPO / "docs" / "cli.md").read_text()
    table = text[text.index("| code | meaning | errors |") :].split("\n\n", 1)[0]
    rows = [row.strip("|").split(" | ") for row in table.splitlines()[2:]]
    return {int(code): set(re.findall(r"`([A-Z]\w+)`", named)) for code, _, named in rows}


def _classes(base: type) -> list[type]:
    return [base] + [sub for child in base.__subclasses__() for sub in _classes(child)]


def test_the_exit_code_table_is_the_one_the_errors_carry() -> None:
    documented = _documented_exit_codes()
    assert set(documented) == {errors.EXIT_OK, errors.EXIT_FAILED, errors.EXIT_BAD_INPUT, errors.EXIT_CONFLICT,
                               errors.EXIT_NO_ANSWER, 141}  # fmt: skip
    for code, named in documented.items():
        for name in named:
            assert getattr(errors, name).exit_code == code, (name, code)
    # every class that sets its own code is named in its row (the others inherit a named class's)
    for cls in _classes(errors.WebDatasetError):
        if "exit_code" in vars(cls) and cls is not errors.WebDatasetError:
            assert cls.__name__ in documented[cls.exit_code], (cls.__name__, cls.exit_code)


def test_each_exit_code_for_real(tmp_path: Path) -> None:
    root = tmp_path / "digits"
    published_digits(root, FIRST)
    commit_table(root, SECOND, digits_table())
    cases = {
        errors.EXIT_OK: ("inspect", str(root)),
        errors.EXIT_FAILED: ("publish", str(root), SECOND),  # not validated: refused
        errors.EXIT_BAD_INPUT: ("validate", str(root / "versions" / FIRST), "--report", str(root / "versions" / FIRST / "r.json")),
        errors.EXIT_NO_ANSWER: ("cat", str(root / "versions" / FIRST / "shard-999999.tar")),
    }  # fmt: skip
    for code, args in cases.items():
        result = run_cli(*args)
        assert result.returncode == code, (args, result.returncode, result.stderr)
        assert "Traceback" not in result.stderr
        if code:
            assert result.stderr.startswith(f"spark-webdataset {args[0]}: error: "), result.stderr
            assert result.stderr.count("\n") == 1, result.stderr
    from spark_webdataset.dataset.layout import Dataset
    from spark_webdataset.dataset.lock import CommitLock

    with CommitLock(Dataset(str(root)).version(SECOND), "a-running-commit"):
        held = run_cli("publish", str(root), SECOND, "--lock-wait", "1s")
    assert held.returncode == errors.EXIT_CONFLICT, (held.returncode, held.stderr)
    assert held.stderr.startswith("spark-webdataset publish: error: ") and "a-running-commit" in held.stderr, (
        held.stderr
    )
    assert held.stderr.count("\n") == 1 and "Traceback" not in held.stderr, held.stderr
    absent = run_cli("get", str(root), "nope")  # the answer is no, as grep's
    assert absent.returncode == errors.EXIT_FAILED and absent.stderr.startswith(
        "spark-webdataset get: error: no sample"
    )
    no_field = run_cli("get", str(root), "00007", "--field", "jpg")
    assert no_field.returncode == errors.EXIT_BAD_INPUT and "it has png, cls, json" in no_field.stderr, no_field.stderr
    assert run_cli("gc", str(tmp_path / "nothing"), "--keep-last", "1").returncode == errors.EXIT_BAD_INPUT
    assert run_cli("inspect").returncode == errors.EXIT_BAD_INPUT  # argparse's usage error
