"""Unit tests mirror the package: tests/unit/<package path>/test_<module>[_<aspect>].py tests
plugins/spark_webdataset/<package path>/<module>.py first, so the tests of a module are found by its
name. tests/unit/repo (the repository's own rules) and tests/unit/support (the test helpers) are
not about one module."""

from __future__ import annotations

from pathlib import Path

from tests.support import REPO

PACKAGE = REPO / "plugins" / "spark_webdataset"
UNIT = REPO / "tests" / "unit"
NOT_MODULE_TESTS = {"repo", "support"}


def _modules() -> dict[Path, set[str]]:
    modules: dict[Path, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            modules.setdefault(path.parent.relative_to(PACKAGE), set()).add(path.stem)
    return modules


def test_every_unit_test_file_is_named_after_a_module_of_its_package() -> None:
    modules = _modules()
    stray = []
    for test in sorted(UNIT.rglob("test_*.py")):
        where = test.parent.relative_to(UNIT)
        if where.parts and where.parts[0] in NOT_MODULE_TESTS:
            continue
        name = test.stem.removeprefix("test_")
        if not any(name == module or name.startswith(f"{module}_") for module in modules.get(where, ())):
            stray.append(str(test.relative_to(REPO)))
    assert not stray, f"unit test files named after no module of their package: {stray}"
