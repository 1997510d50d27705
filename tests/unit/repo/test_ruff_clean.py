"""The code is lint-clean and formatted: `ruff check` and `ruff format --check` over the repository,
with pyproject.toml's settings (the rules chosen, and why four are ignored, are written there)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import REPO

RUFF = Path(sys.executable).parent / "ruff"


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_ruff_check_finds_nothing() -> None:
    result = _ruff("check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_every_file_is_formatted() -> None:
    result = _ruff("format", "--check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
