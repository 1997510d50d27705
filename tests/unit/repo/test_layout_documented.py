"""The layout's names live in dataset/tree.py; the one tree that shows them to users is docs/versions.md's
(README links to it). Every name the layout gives a file or folder is in that tree."""

from __future__ import annotations

from spark_webdataset.dataset import tree as layout_tree
from tests.support import REPO


def test_the_documented_tree_names_every_layout_file() -> None:
    text = (REPO / "docs" / "versions.md").read_text()
    tree = text[text.index("## A dataset on storage") :].split("\n\n", 2)[1]
    names = {
        value
        for name, value in vars(layout_tree).items()
        if (name.endswith("_NAME") or name.endswith("_DIR"))
        and isinstance(value, str)
        and name not in {"STAGED_INDEX_NAME"}  # a task's file inside _staging/<job>/
    }
    missing = sorted(name for name in names if name not in tree)
    assert not missing, f"docs/versions.md's layout tree lacks {missing}"
