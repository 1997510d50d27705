"""The build rules are defined once, in dataset/build_rules.py: no other module of the package defines
the change kinds, the orders, the parent rule or a duration parser, and the config model imports no job."""

from __future__ import annotations

import ast

from tests.support import REPO

PACKAGE = REPO / "plugins" / "spark_webdataset"
RULES = PACKAGE / "dataset" / "build_rules.py"
NAMES = {"APPEND", "UPSERT", "DELETE", "CHANGES", "ORDERS", "LATEST", "parse_duration", "parse_max_shard_bytes",
         "check_change", "check_parent", "check_change_parent", "change_needs_parent", "DURATION_RULE"}  # fmt: skip
# format/shard_writer.py still defines its own copy of the shard cap's parser, for ShardWriter.__init__'s
# re-check of the options (its file is being rewritten elsewhere; the check and the copy go together).
NOT_YET: set[tuple[str, str]] = set()


def _definitions(path) -> set[str]:
    """Names a module defines at its top level (functions, classes, assignments), not those it imports."""
    defined: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        defined.add(name.id)
    return defined


def test_each_build_rule_is_defined_in_build_rules_only() -> None:
    assert NAMES - {"change_needs_parent"} <= _definitions(RULES)
    elsewhere = {
        (str(path.relative_to(PACKAGE)), name)
        for path in PACKAGE.rglob("*.py")
        if path != RULES
        for name in _definitions(path) & NAMES
    }
    assert elsewhere == NOT_YET


def test_the_config_model_and_the_dag_factory_import_no_job() -> None:
    for module in ("configs.py", "dags.py"):
        tree = ast.parse((PACKAGE / "airflow" / module).read_text())
        imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not {name for name in imported if name.startswith("jobs.build")}, module
