"""Fixtures for the integration tests that several files share (Spark and the emulator come from tests/conftest.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.helpers import write_text_version


@pytest.fixture(scope="module")
def text_root(spark, tmp_path_factory) -> Path:
    """ROOT with versions/v1 (support.helpers.write_text_version: 120 samples, some without `txt`,
    mtime=TEXT_MTIME), written once a module. Tests only read it (or copy it first: text_root_copy)."""
    root = tmp_path_factory.mktemp("text") / "root"
    write_text_version(spark, root / "versions" / "v1")
    return root


@pytest.fixture
def text_root_copy(text_root, tmp_path) -> Path:
    """A private copy of text_root, for tests that write into it."""
    return Path(shutil.copytree(text_root, tmp_path / "root"))
