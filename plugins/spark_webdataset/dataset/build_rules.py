"""The rules of what a build asks for, written once for every entry point.

A build names a change (append, upsert, delete), a parent (LATEST or a
version id) and a sample order; a config or a command names durations
(task timeouts, gc's minimum age). The data source's options
(`spark/options.py`), the build job's arguments (`jobs/build.py`), a
dataset config (`airflow/configs.py`) and a run's Params
(`airflow/pipeline.py`) all check them here, so each rule has one text; the
shard cap (`parse_max_shard_bytes`) too.
Each entry point spells its settings its own way (`option parent`,
`--parent`, `parent`, `param parent`): it passes a `Spelling` and the
messages name what the user wrote. A broken rule raises BadOption (an
InputError, so a ValueError too: pydantic reports it under the field).
"""

from __future__ import annotations

import datetime
import math
import re
from dataclasses import dataclass
from typing import Any

from ..errors import BadOption, InvalidVersionId
from ..format.shard_writer import MIN_SHARD_BYTES
from ..format.sizes import parse_size
from .paths import check_version_id

APPEND, UPSERT, DELETE = "append", "upsert", "delete"
CHANGES = (APPEND, UPSERT, DELETE)
LATEST = "LATEST"  # parent LATEST: the dataset's LATEST (a DAG run: the newest published before its date)
PARENT_RULE = "LATEST or a version id"
ORDERS = ("hash", "key", "source")


@dataclass(frozen=True)
class Spelling:
    """How one entry point names the build settings, and what it tells a user to write instead."""

    change: str = "change"
    parent: str = "parent"
    order: str = "order"
    fix: str = ""  # appended to "needs a parent": e.g. "; write parent: LATEST, or change: append"


def check_change(value: Any, names: Spelling = Spelling()) -> str:
    """The change asked for: append, upsert or delete (any case, blanks around ignored)."""
    text = str(value).strip().lower()
    if text not in CHANGES:
        raise BadOption(f"{names.change}={value!r} is not one of {', '.join(CHANGES)}")
    return text


def check_parent(value: Any, names: Spelling = Spelling()) -> str | None:
    """The parent asked for: None (none, or blank), LATEST, or a valid version id."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if value == LATEST:
        return LATEST
    try:
        return check_version_id(value)
    except InvalidVersionId as error:
        raise BadOption(f"{names.parent}={value!r} is not {PARENT_RULE}: {error}") from None


def check_change_parent(change: str, parent: str | None, names: Spelling = Spelling()) -> None:
    """A change other than append needs a parent, written out: what a build changes is read, not implied."""
    if change != APPEND and parent is None:
        raise BadOption(
            f"{names.change}={change!r} needs {names.parent} ({PARENT_RULE}): the version it changes{names.fix}"
        )


@dataclass(frozen=True)
class BuildBase:
    """What a build does to which version: its change and its parent, checked together."""

    change: str = APPEND
    parent: str | None = None

    @classmethod
    def checked(cls, change: Any, parent: Any, names: Spelling = Spelling()) -> BuildBase:
        """Both values and their combination; `change` None means append."""
        base = cls(APPEND if change is None else check_change(change, names), check_parent(parent, names))
        check_change_parent(base.change, base.parent, names)
        return base


def check_order(value: Any, names: Spelling = Spelling()) -> str:
    """The sample order: hash (seeded, spread), key (sorted) or source (as read)."""
    if value not in ORDERS:
        raise BadOption(f"{names.order}={value!r} is not one of {', '.join(ORDERS)}")
    return value


def parse_max_shard_bytes(value: str | int, name: str = "maxShardBytes") -> int:
    """The shard cap from what a person wrote ("3GiB", 1048576): the one parser and rule of it.

    The writer's option, the jobs' argument, a dataset config's field and a run's Param all go
    through here; `name` is what the error calls it (`option maxShardBytes`, `--max-shard-bytes`).
    """
    try:
        size = parse_size(value, name)
    except ValueError as error:
        raise BadOption(str(error)) from None
    if size < MIN_SHARD_BYTES:
        raise BadOption(
            f"{name}={value} is smaller than one tar header plus the end-of-archive blocks ({MIN_SHARD_BYTES} bytes)"
        )
    return size


# -- durations: task timeouts, gc's minimum age --------------------------------------------------------

_UNIT_SECONDS = {"w": 604800.0, "d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([wdhms])\s*")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
DURATION_RULE = (
    "seconds as a number, or amounts with units w, d, h, m, s from the largest down (e.g. 90s, 30m, 1h30m, 1.5d, 2w)"
)
MAX_DURATION_SECONDS = 3650 * 86400  # ten years means "never"; more overflows timedelta


def parse_duration(value: Any, name: str = "", *, above_zero: bool = False) -> float:
    """Seconds in `90`, `90s`, `30m`, `1h30m`, `1.5d`, `2w`: the one duration grammar.

    A number (not a bool) is seconds. Units come from the largest down, each at most once; an
    amount may have decimals. Zero is allowed unless `above_zero`; at most ten years. `name` is
    what the error calls the value (none: the caller says where it was).
    """
    given = f"{name}={value!r}" if name else repr(value)
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (seconds := _seconds(value.strip().lower())) is not None:
        pass
    else:
        raise BadOption(f"{given} is not a duration: {DURATION_RULE}")
    if math.isnan(seconds) or seconds < 0 or (above_zero and seconds == 0):
        raise BadOption(f"{given} must be {'above' if above_zero else 'at least'} zero: {DURATION_RULE}")
    if seconds > MAX_DURATION_SECONDS:
        raise BadOption(f"{given} is more than {MAX_DURATION_SECONDS // 86400} days")
    return seconds


def _seconds(text: str) -> float | None:
    """The seconds `text` spells, or None when it breaks the grammar."""
    if _NUMBER.fullmatch(text):
        return float(text)
    seconds, position, units = 0.0, 0, ""
    for match in _PART.finditer(text):
        if match.start() != position or (units and "wdhms".index(match.group(2)) <= "wdhms".index(units[-1])):
            return None  # a gap of other text, or a unit out of order or repeated
        seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position, units = match.end(), units + match.group(2)
    return seconds if units and position == len(text) else None


def spell_duration(seconds: float) -> str:
    """A duration as a config writes it (6h, 1h30m, 45s): what `parse_duration` reads back."""
    whole, parts = int(seconds), []
    for unit in "dhms":
        size = int(_UNIT_SECONDS[unit])
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    return "".join(parts) or "0s"
