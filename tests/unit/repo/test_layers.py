"""The house's rules, read from the code's own imports (every import, lazy ones in functions too):
no import circle between modules, no import from a lower layer to a higher one, the format core
and the dataset layer free of Spark, Airflow and GCS, and nothing outside tests/ importing tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import REPO

PACKAGE = REPO / "plugins" / "spark_webdataset"
# bottom to top: a module may import its own layer and the layers below it, never above
LAYERS = {
    "errors": 0, "fault_points": 0, "format": 1, "storage": 1, "dataset": 2, "spark": 3, "jobs": 4, "airflow": 5,
    "cli": 6, "__init__": 6,
}  # fmt: skip
FORBIDDEN_LIBRARIES = {
    "format": ("pyspark", "airflow", "google", "fastapi"),
    "storage": ("pyspark", "airflow", "fastapi"),
    "dataset": ("pyspark", "airflow", "google", "fastapi"),
    "fault_points": ("pyspark", "airflow", "google", "fastapi"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """Whether a dotted name of the package is a module of it (a file, or a folder with __init__.py)."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports(path: Path) -> set[str]:
    """Absolute names of everything `path` imports (the module itself, or the package and its names)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = {f"{module}.{alias.name}" for alias in node.names}
            found.update(names)
            if not all(_is_module(name) for name in names):  # `from .. import fault_points`: the module only
                found.add(module)
    return found


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def own_imports(path: Path) -> set[str]:
    """The package's modules that `path` imports (a name imported from a package counts as its module if it is one)."""
    return {name for name in imports(path) if name in MODULES} - {module_name(path)}


def layer(module: str) -> tuple[str, int]:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return top, LAYERS[top]


def test_every_package_has_a_layer() -> None:
    assert {layer(module)[0] for module in MODULES} <= set(LAYERS)


def test_no_import_runs_up_a_layer() -> None:
    upward = []
    for module, path in MODULES.items():
        top, rank = layer(module)
        for imported in own_imports(path):
            other, other_rank = layer(imported)
            if other_rank > rank or (rank == 1 and other != top and other_rank == 1):
                upward.append(f"{module} -> {imported}")
    assert upward == []


def test_no_import_circle() -> None:
    graph = {module: {i for i in own_imports(path) if not MODULES[i].name == "__init__.py" or i == module}
             for module, path in MODULES.items()}  # fmt: skip
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(graph[module]):
            if state.get(nxt) == 1:
                circles.append(trail[trail.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


@pytest.mark.parametrize("package", sorted(FORBIDDEN_LIBRARIES))
def test_lower_layers_import_no_engine(package: str) -> None:
    offending = [
        f"{module} imports {name}"
        for module, path in MODULES.items()
        if layer(module)[0] == package
        for name in imports(path)
        if name.split(".")[0] in FORBIDDEN_LIBRARIES[package]
    ]
    assert offending == []


# the tests and tests/support/ are imported as tests.<...>; a bare module name would mean tests/support on sys.path.
# bench/ (dev tooling, like the tests; not in the wheel nor the image's commands) may use tests.support: the GCS
# emulator launcher lives there, out of the package.
DEV_SUPPORT = {"bench": "tests.support"}
TEST_MODULES = {"tests", "conftest", "support"} | {
    path.stem for path in (REPO / "tests").rglob("*.py") if path.stem != "__init__"
}


def test_nothing_outside_tests_imports_tests() -> None:
    offending = []
    for folder in ("plugins", "bench", "dags", "jobs", "scripts"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix not in {".py", ".sh"} or not path.is_file():
                continue
            text = path.read_text()
            if path.suffix == ".sh":  # a path into tests/ on a line of code: a file of tests/ run
                if any("tests/" in line.split("#", 1)[0] for line in text.splitlines()):
                    offending.append(str(path.relative_to(REPO)))
                continue
            if path.suffix == ".py":
                tree = ast.parse(text)
                names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
                names |= {
                    node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and not node.level
                }
                paths = {
                    node.value
                    for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)
                }
                allowed = DEV_SUPPORT.get(folder)
                names = {
                    name for name in names if not (allowed and (name == allowed or name.startswith(allowed + ".")))
                }
                if any(name.split(".")[0] in TEST_MODULES for name in names) or any(
                    value == "tests" or value.startswith("tests/")
                    for value in paths  # tests/ put on sys.path
                ):
                    offending.append(str(path.relative_to(REPO)))
    assert sorted(set(offending)) == []
