"""The tar rules our three parsers apply, written once: how a size is spelled, how far it may reach, PAX records.

The exact parser (`sample_reader.iter_members`) applies them header by
header and is the judge. The two fast paths (`fast_scan`, the reader's;
`scan`, the validator's) apply the vectorized forms below to whole chunks
of headers and hand any member that breaks one to the exact parser (or
say "not sure"), so all three fail the same bytes with the same error.

The rules:

- A size field is octal digits (NUL/space padded), or GNU base-256: a
  first byte 0x80 and a big-endian number after it. A negative base-256
  number (first byte 0xff), other bytes, a sign or a `0o` prefix are not
  sizes.
- A member's size (from its header, or from a PAX `size` record before
  it) is at most what is left of the shard after its header, padding
  included, and at most the configured maximum member size
  (SPARK_WEBDATASET_MAX_MEMBER_BYTES, default 2 GiB: a Spark binary value
  holds less). An extended header (PAX, GNU long name) holds at most
  MAX_EXTENDED_HEADER_BYTES. Both are checked before a byte is
  allocated, so a hostile size costs nothing.
- A PAX record is `<length> <key>=<value>\n`, its length counting the
  whole record; a length that runs past the extended header or does not
  land on the record's newline is an error, not a guess.
"""

from __future__ import annotations

import os
import re
from typing import BinaryIO

import numpy as np

from ..errors import BadOption, BadPaxRecord, MemberSizeError, TarFormatError
from .sizes import parse_size

BLOCK = 512
MAX_MEMBER_ENV = "SPARK_WEBDATASET_MAX_MEMBER_BYTES"
DEFAULT_MAX_MEMBER_BYTES = 2 << 30
MAX_EXTENDED_HEADER_BYTES = 1 << 20
_OCTAL_WEIGHTS = (8 ** np.arange(10, -1, -1)).astype(np.float64)  # exact: sizes < 2**33
_PAX_LENGTH = re.compile(rb"([0-9]+) ")
_DECIMAL = re.compile(r"[0-9]{1,20}")


def max_member_bytes(value: int | str | None = None) -> int:
    """The maximum member size: `value` if given, else the environment's, else DEFAULT_MAX_MEMBER_BYTES."""
    if value is None:
        value = os.environ.get(MAX_MEMBER_ENV) or DEFAULT_MAX_MEMBER_BYTES
    try:
        return parse_size(value, MAX_MEMBER_ENV)
    except ValueError as error:
        raise BadOption(str(error)) from None


def padded(size: int) -> int:
    """Bytes a payload of `size` takes in the tar, padding to the block included."""
    return size + (-size % BLOCK)


def remaining(stream: BinaryIO) -> int | None:
    """Bytes from the stream's position to its end, if it can seek (and so say); else None."""
    if not stream.seekable():
        return None
    here = stream.tell()
    end = stream.seek(0, os.SEEK_END)
    stream.seek(here)
    return end - here


# -- one header at a time (the exact parser) ---------------------------------------------------


def decode_number(raw: bytes, offset: int, what: str) -> int:
    """A numeric header field: octal digits, or GNU base-256 (first byte 0x80)."""
    if raw and raw[0] & 0x80:
        if raw[0] == 0x80:
            return int.from_bytes(raw[1:], "big")
        if raw[0] == 0xFF:
            raise TarFormatError(f"the {what} field {raw!r} is a negative base-256 number", offset)
        raise TarFormatError(f"the {what} field {raw!r} is neither octal nor base-256", offset)
    text = raw.rstrip(b"\0 ").lstrip(b" ")
    if not text:
        return 0
    if text.translate(None, b"01234567"):  # int() would take a sign, '_' or '0o'
        raise TarFormatError(f"the {what} field {raw!r} is not an octal number", offset)
    return int(text, 8)


def check_member_size(name: str, size: int, offset: int, left: int | None, limit: int, source: str = "") -> int:
    """The member's padded size, if `size` keeps the rules; else MemberSizeError at its header's `offset`.

    `left`: bytes of the shard after the header (None: not known, the read
    finds out); `limit`: the maximum member size; `source`: where the size
    came from when not the header's own octal field ("base-256", "from a PAX
    record").
    """
    whole = padded(size)
    if left is not None and whole > left:
        raise truncated(name, max(left, 0), whole, offset, size, source)
    if size > limit:
        raise MemberSizeError(
            f"member {name!r} claims {_size(size, source)}, more than the maximum member size {limit} "
            f"({MAX_MEMBER_ENV})",
            offset,
        )
    return whole


def _size(size: int, source: str) -> str:
    return f"{size} bytes" + (f" ({source})" if source else "")


def truncated(name: str, got: int, whole: int, offset: int, size: int, source: str = "") -> MemberSizeError:
    """The error of a member whose size runs past the end of the shard: the same whether the end was
    known before the read (a seekable stream, a listed size) or found by it (a pipe)."""
    return MemberSizeError(
        f"member {name!r} is truncated ({got} of {whole} bytes): its size, {_size(size, source)}, "
        "runs past the end of the shard",
        offset,
    )


def extended_truncated(got: int, whole: int, offset: int) -> MemberSizeError:
    return MemberSizeError(f"the tar is truncated inside an extended header ({got} of {whole} bytes)", offset)


def check_extended_size(size: int, offset: int, left: int | None) -> int:
    """The padded size of an extended header's records (PAX, GNU long name), if within the rules."""
    whole = padded(size)
    if left is not None and whole > left:
        raise extended_truncated(max(left, 0), whole, offset)
    if size > MAX_EXTENDED_HEADER_BYTES:
        raise MemberSizeError(
            f"an extended header claims {size} bytes, more than the {MAX_EXTENDED_HEADER_BYTES} one may hold",
            offset,
        )
    return whole


def parse_pax(data: bytes, offset: int) -> dict[str, str]:
    """The records of a PAX extended header; BadPaxRecord at the header's `offset` for any that does not parse."""
    records: dict[str, str] = {}
    position, total = 0, len(data)
    while position < total:
        match = _PAX_LENGTH.match(data, position)
        if not match:
            raise BadPaxRecord(f"a PAX record has no length (at byte {position} of the extended header)", offset)
        digits = match.group(1)
        left = total - position
        if len(digits) > 18 or int(digits) > left:
            raise BadPaxRecord(
                f"a PAX record's length {digits.decode()} runs past its extended header ({left} bytes left)", offset
            )
        end = position + int(digits)
        if end <= match.end() or data[end - 1] != 0x0A:
            raise BadPaxRecord(
                f"a PAX record's length {digits.decode()} does not end the record at its newline", offset
            )
        key, equals, value = data[match.end() : end - 1].partition(b"=")
        if not equals or not key:
            raise BadPaxRecord("a PAX record is not of the shape <length> <key>=<value>", offset)
        records[key.decode("utf-8", "replace")] = value.decode("utf-8", "surrogateescape")
        position = end
    return records


def pax_size(records: dict[str, str], offset: int) -> int | None:
    """The member size a PAX `size` record gives (it overrides the header's), or None."""
    value = records.get("size")
    if value is None:
        return None
    if not _DECIMAL.fullmatch(value):
        raise BadPaxRecord(f"the PAX size {value!r} is not a decimal number", offset)
    return int(value)


# -- whole chunks of headers (the fast paths) --------------------------------------------------


def octal_sizes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(valid, sizes) of (n, 512) header rows: valid where the size field is 11 octal digits and a NUL
    or a space, the one shape the fast paths read; anything else is for the exact parser."""
    digits = rows[:, 124:135] - np.uint8(48)
    valid = (digits < 8).all(axis=1) & ((rows[:, 135] == 0) | (rows[:, 135] == 32))
    sizes = (digits.astype(np.float64) @ _OCTAL_WEIGHTS).astype(np.int64)
    return valid, sizes


def sizes_within(
    sizes: np.ndarray, limit: int, after_headers: np.ndarray | None = None, end: int | None = None
) -> np.ndarray:
    """Per member: does its size keep `check_member_size`'s rules? `limit`: the maximum member size;
    `after_headers`: where each payload starts and `end`: where the shard ends (None: not known),
    in one coordinate."""
    within = sizes <= limit
    if end is not None and after_headers is not None:
        within &= after_headers + sizes + (-sizes % BLOCK) <= end
    return within
