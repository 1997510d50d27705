"""Every error class a user can meet is in the docs' error table (one table, in docs/writing-and-reading.md)."""

from __future__ import annotations

import re

from spark_webdataset import errors
from tests.support import REPO


def _classes(base: type) -> set[str]:
    found = {base.__name__}
    for sub in base.__subclasses__():
        found |= _classes(sub)
    return found


def test_the_error_table_names_every_error_class() -> None:
    text = (REPO / "docs" / "writing-and-reading.md").read_text()
    table = text[text.index("| error | when |") :].split("\n\n", 1)[0]
    named = set(re.findall(r"`(\w+)`", table))
    missing = _classes(errors.WebDatasetError) - {"WebDatasetError"} - named
    assert not missing, f"docs/writing-and-reading.md's error table lacks {sorted(missing)}"
