"""The CLI (spark_webdataset.cli) in a process of its own: errors are one line with an exit code."""

from __future__ import annotations

from tests.support.helpers import run_cli


def test_cli_errors_are_one_line_with_an_exit_code(tmp_path) -> None:
    import os

    missing = run_cli("inspect", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "no dataset there" in missing.stderr
    workers = run_cli("validate", str(tmp_path), "--workers", "-1")
    assert workers.returncode == 2 and "must be at least 1" in workers.stderr
    scheme = run_cli("inspect", "az://bucket/ds")
    assert scheme.returncode == 2 and "unsupported URI scheme 'az'" in scheme.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")}
    env["GOOGLE_APPLICATION_CREDENTIALS"] = str(tmp_path / "no-such-key.json")
    credentials = run_cli("inspect", "gs://bucket/ds", env=env)
    assert credentials.returncode == 2
    assert "Application Default Credentials" in credentials.stderr and "STORAGE_EMULATOR_HOST" in credentials.stderr
    for result in (missing, workers, scheme, credentials):
        assert "Traceback" not in result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith("spark-webdataset")  # after argparse's usage
