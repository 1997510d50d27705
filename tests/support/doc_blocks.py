"""The fenced code blocks of README.md and docs/*.md, as the docs runner (tests/integration/test_docs_run.py)
executes them: python blocks run, yaml blocks load as dataset configs, shell lines run or, when they are a
synopsis (`ROOT`, `V`, `...`), have their flags checked against the command's own parser."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from tests.support import REPO

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# A word in capitals (ROOT, V, SRC, OUT.zip) or `...` stands for something the reader fills in.
_PLACEHOLDER = re.compile(r"[\[\]|]*(?:[A-Z][A-Z0-9_]*(?:\.\w+)?|\.\.\.)[\[\]|]*")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    return [
        Block(path, text[: match.start()].count("\n") + 1, match.group(1), match.group(2))
        for match in _FENCE.finditer(text)
    ]


def shell_commands(text: str) -> list[list[str]]:
    """One command a line (continuations joined) as its words; comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [words for words in (shlex.split(line, comments=True) for line in joined.splitlines()) if words]


def without_optional_parts(words: list[str]) -> list[str]:
    """`gc ROOT --keep-last 7 [--dry-run]` -> `gc ROOT --keep-last 7`: what the line runs when nothing optional is asked."""
    kept, depth = [], 0
    for word in words:
        opened = depth > 0 or word.startswith("[")
        depth += word.count("[") - word.count("]")
        if not opened:
            kept.append(word)
    return kept


def is_synopsis(words: list[str]) -> bool:
    """A line with words the reader fills in (after its optional parts are dropped): not runnable as written."""
    parts = [part for word in without_optional_parts(words) for part in re.split(r"[/=]", word)]
    return any(_PLACEHOLDER.fullmatch(part) or "..." in part for part in parts)


def flags(words: list[str]) -> list[str]:
    """Every `--flag` a line names, optional parts included."""
    return sorted({flag for word in words for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", word)})
