"""Keys, field names and member names by docs/design.md, "WebDataset rules we write by".

A reader splits a member name at the first dot of its last path part, so
what we accept here is exactly what every reader groups back the same way.
Invalid input is an error that names the key or field and the rule; we
never rename silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from ..errors import InvalidField

KEY_COLUMN = "__key__"
# Columns readers add or treat as metadata; a user column of this shape
# would be skipped by readers, so it is refused.
RESERVED_COLUMN = re.compile(r"^__.*__$")
USTAR_NAME_BYTES = 100
# The regex webdataset and wids use to split a member name.
MEMBER_NAME = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_RESERVED_PART = re.compile(r"^__.*__$")
# Control characters (C0 and DEL): readers such as wids cannot split a name holding one (their
# regexes' `.` stops at a newline), so no key, field or member name may hold one.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
CONTROL_RULE = (
    "control characters (C0 0x00-0x1F: NUL, tab, newline, ...; DEL 0x7F) are not allowed: "
    "readers such as wids cannot parse them"
)

# One RE2/Python regex that matches every key some rule refuses; used to
# scan whole Arrow columns at once, then `key_error` says which rule.
INVALID_KEY_PATTERN = r"^$|^[/.]|(^|/)\.\.?(/|$)|[\x00-\x1f\x7f]|(^|/)__[^/]*__(/|$)|\.[^/]*$|/$|//"


def key_error(key: object) -> str | None:
    """Say which rule `key` breaks, or None if it is a valid sample key."""
    if key is None:
        return "the key is null"
    if not isinstance(key, str):
        return f"the key must be a string, not {type(key).__name__}"
    if key == "":
        return "the key is empty"
    control = control_error(key)
    if control:
        return f"the key holds {control}"
    if key[0] in "/.":
        return f"the key starts with {key[0]!r}"
    parts = key.split("/")
    if parts[-1] == "":
        return "the key ends with '/' (its last path part is empty)"
    if "" in parts:
        return "the key has an empty path part ('//'); 'a//b' and 'a/b' extract to the same file"
    for part in parts:
        if part in (".", ".."):
            return f"the key has a {part!r} path segment"
        if _RESERVED_PART.match(part):
            return f"the key has a path part {part!r} shaped __x__, which readers skip"
    if "." in parts[-1]:
        return f"the key's last path part {parts[-1]!r} holds a '.', so readers would split the member name there"
    return None


def field_error(field: str) -> str | None:
    """Say which rule the field (column) name breaks, or None."""
    if field == "":
        return "the field name is empty"
    control = control_error(field)
    if control:
        return f"the field name holds {control}"
    if field == KEY_COLUMN:
        return None
    if RESERVED_COLUMN.match(field):
        return f"{field!r} is a reserved column name (only {KEY_COLUMN!r} may have the __x__ shape)"
    if field != field.lower():
        return f"field names must be lower case ({field!r}; rename the column to {field.lower()!r})"
    if "/" in field:
        return "a field name may not hold '/' or NUL"
    if field.startswith("."):
        return "a field name may not start with '.'"
    return None


def field_name_error(field: str, allow_pax: bool) -> str | None:
    """Say why a field name cannot go into a portable USTAR header, or None."""
    if not allow_pax and not field.isascii():
        return f"field name {field!r} is not ASCII (set option allowPax=true to write PAX headers)"
    return None


def check_fields(columns: Sequence[str]) -> list[str]:
    """Validate a writer's columns; return the field names in column order."""
    if KEY_COLUMN not in columns:
        raise InvalidField(
            f"no {KEY_COLUMN!r} column: the DataFrame needs a string column {KEY_COLUMN!r} holding each sample's key"
        )
    seen: set[str] = set()
    fields: list[str] = []
    for column in columns:
        problem = field_error(column)
        if problem:
            raise InvalidField(f"column {column!r}: {problem}")
        if column in seen:
            raise InvalidField(f"column {column!r} appears twice: field names must be unique")
        seen.add(column)
        if column != KEY_COLUMN:
            fields.append(column)
    if not fields:
        raise InvalidField(f"no field columns besides {KEY_COLUMN!r}: a sample needs at least one field")
    return fields


def member_name(key: str, field: str) -> str:
    return f"{key}.{field}"


def member_name_error(name: str, allow_pax: bool) -> str | None:
    """Say why `name` cannot be a portable USTAR member name, or None."""
    if allow_pax:
        return None
    if not name.isascii():
        return f"member name {name!r} is not ASCII (set option allowPax=true to write PAX headers)"
    size = len(name.encode())
    if size > USTAR_NAME_BYTES:
        return (
            f"member name {name!r} is {size} bytes; portable USTAR names hold at most "
            f"{USTAR_NAME_BYTES} (shorten the key, or set option allowPax=true)"
        )
    return None


def split_member_name(name: str) -> tuple[str, str] | None:
    """(key, field) as WebDataset readers split it, or None if not of that shape."""
    match = MEMBER_NAME.match(name)
    if not match:
        return None
    return match.group(1), match.group(2)


def unsafe_member_name(name: str) -> bool:
    """A member name no reader may extract as it stands: absolute, with a `..` path part, or with a NUL."""
    return name.startswith("/") or any(part == ".." for part in name.split("/")) or "\0" in name


def member_name_fault(name: str) -> str:
    """Why a shard may not hold a member of this name (for a name `member_parts` refuses)."""
    if "\0" in name:
        return "it holds a NUL"
    if name.startswith("/") or any(part == ".." for part in name.split("/")):
        return "it is absolute or has a '..' path part, so a reader would extract it outside its directory"
    return "it is not of the <key>.<field> shape (a '.' in its last path part, after a non-empty key)"


def control_error(text: str) -> str | None:
    """Say where `text` (a key, a field or a member name) holds a control character, or None."""
    control = _CONTROL.search(text)
    if control:
        return f"{control.group()!r} at character {control.start()}: {CONTROL_RULE}"
    return None


def member_parts(name: str) -> tuple[str, str] | None:
    """(key, field) of a member name a shard may hold: of the `<key>.<field>` shape and safe; else None."""
    parts = split_member_name(name)
    if parts is None or unsafe_member_name(name):
        return None
    return parts


_DOT, _SLASH = ord("."), ord("/")


def split_names(names: np.ndarray, strict: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`member_parts` for (n, w) NUL-padded names at once: (lengths, dots, faults), the key being
    name[:dot] and the field name[dot+1:length].

    The key ends at the first '.' of the last path part, as MEMBER_NAME
    splits it. Faults (rows the exact parser judges): no such dot, an empty
    last-part key, any byte outside printable ASCII (a control character:
    no key or field may hold one, and MEMBER_NAME's `.` stops at a newline;
    a byte the exact parser decodes as UTF-8 or refuses); with `strict` (the
    reader) also what `unsafe_member_name` refuses and more: a leading '/',
    and '..' anywhere. The validator, not strict, holds the keys to
    INVALID_KEY_PATTERN instead, which refuses every unsafe name.
    """
    # Columns past the last non-NUL byte of every row change nothing (a row with no NUL left ends
    # where it is cut, as it would at the NUL): names are far shorter than the 100-byte field.
    used = np.flatnonzero(names.any(axis=0))
    names = names[:, : int(used[-1]) + 1 if len(used) else 1]
    width = names.shape[1]
    columns = np.arange(width)
    zero = names == 0
    lengths = np.where(zero.any(axis=1), zero.argmax(axis=1), width)
    inside = columns < lengths[:, None]
    # control characters, and bytes past ASCII (a name the exact parser must decode as UTF-8, or refuse)
    faults = (((names < 32) | (names > 126)) & inside).any(axis=1)
    if strict:
        faults |= names[:, 0] == _SLASH
        faults |= ((names[:, :-1] == _DOT) & (names[:, 1:] == _DOT)).any(axis=1)
    slash = (names == _SLASH) & inside
    last_slash = np.where(slash.any(axis=1), width - 1 - slash[:, ::-1].argmax(axis=1), -1)
    dots = (names == _DOT) & inside & (columns > last_slash[:, None])
    faults |= ~dots.any(axis=1)
    dot = dots.argmax(axis=1)
    faults |= dot <= last_slash + 1
    return lengths, dot, faults


def first_invalid_key(keys: Iterable[object]) -> tuple[int, object, str] | None:
    for index, key in enumerate(keys):
        problem = key_error(key)
        if problem:
            return index, key, problem
    return None
