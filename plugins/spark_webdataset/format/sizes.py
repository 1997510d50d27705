"""Byte sizes as people write them ("512MiB", "3GiB", "1000000")."""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int, name: str = "size") -> int:
    """Parse a byte size; `name` is what the error calls it (an option, an argument, a variable)."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        unit = match.group(2).lower() if match else None
        if not match or unit not in _UNITS:
            raise ValueError(f"{name}={text!r} is not a byte size (write e.g. 1048576, 512MiB, 3GiB)")
        value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"{name}={text!r} must be positive")
    return value


def spell_size(size: int) -> str:
    """A byte size as people write it, exactly ("3GiB" for 3 * 1024**3; digits when no unit divides it)."""
    for unit in ("tib", "gib", "mib", "kib"):
        if size and size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]}{unit[0].upper()}i{unit[2].upper()}"
    return str(size)


def format_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
