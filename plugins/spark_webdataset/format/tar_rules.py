"""The tar rules our three parsers apply, written once: how a size is spelled, how far it may reach, PAX records.

The exact parser (`sample_reader.iter_members`) applies them header by
header and is the judge. The two fast paths (`fast_read`, the reader's;
`fast_verify`, the validator's) apply the vectorized forms below to whole chunks
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
- A header's checksum is the sum of its 512 bytes with the checksum
  field counted as 8 spaces; the field is a number as sizes are spelled.
- A header's magic and version are POSIX ustar (`ustar\0` `00`), GNU
  (`ustar ` ` \0`) or absent (8 NUL bytes, a v7 header); anything else
  is not a tar header we read.
- Type flags: `0`, NUL and `7` are regular files, the only members a
  shard may hold; `x` (PAX), `g` (PAX global) and `L` (GNU long name)
  are extended headers that describe the next member; any other type
  (links, directories, devices, ...) is an error at its header.
- A member's name is the PAX `path` or GNU long name before it if any,
  else the name field, with the prefix field and a `/` before it when the
  magic is ustar's and the prefix is not empty. It is UTF-8, a
  `<key>.<field>` name and safe (`names.member_parts`: not absolute, no
  `..` part, no NUL). Validation also refuses any other control
  character in a key or field (`names.control_error`); readers read them.
- The size chain: a member's header, then its payload padded to the
  block (`padded`), then the next header; two zero blocks end the tar.

Every fault's message is written here (the functions that build the
errors), so the exact parser names it and the fast paths never spell
one: they hand the bytes to the exact parser.
"""

from __future__ import annotations

import os
import re
from typing import BinaryIO

import numpy as np

from ..errors import BadOption, BadPaxRecord, MemberSizeError, TarFormatError
from .names import member_name_fault
from .sizes import parse_size

BLOCK = 512

# the header fields the rules read: (start, end) byte ranges of a 512-byte header
NAME = (0, 100)
SIZE = (124, 136)
CHECKSUM = (148, 156)
TYPEFLAG = 156
MAGIC = (257, 265)  # magic (6 bytes) and version (2)
PREFIX = (345, 500)
POSIX_MAGIC = b"ustar\x0000"  # magic and version, as our writer (ustar.py) spells them
USTAR_MAGICS = (POSIX_MAGIC, b"ustar  \0", bytes(8))  # POSIX, GNU, v7 (none)
REGULAR_TYPES = (b"0", b"\0", b"7")
PAX_TYPE, PAX_GLOBAL_TYPE, GNU_LONG_NAME_TYPE = b"x", b"g", b"L"
EXTENDED_TYPES = (PAX_TYPE, GNU_LONG_NAME_TYPE, PAX_GLOBAL_TYPE)
ZERO_BLOCK = bytes(BLOCK)
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


def blocks_after(size: int | np.ndarray) -> int | np.ndarray:
    """Blocks from a member's header to the next header: the header and the padded payload (the size chain)."""
    return 1 + (size + BLOCK - 1) // BLOCK


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


def header_checksum(header: bytes) -> int:
    """The checksum a header must carry: its byte sum with the checksum field counted as spaces."""
    return sum(header[: CHECKSUM[0]]) + 8 * 32 + sum(header[CHECKSUM[1] :])


def check_header(header: bytes, offset: int) -> None:
    """The rules of one (non-zero) header block: its checksum, then its magic and version."""
    stored = decode_number(header[CHECKSUM[0] : CHECKSUM[1]], offset, "checksum")
    computed = header_checksum(header)
    if stored != computed:
        raise TarFormatError(f"header checksum {stored} does not match the header ({computed})", offset)
    magic = header[MAGIC[0] : MAGIC[1]]
    if magic not in USTAR_MAGICS:
        raise TarFormatError(f"header magic and version {magic!r} are neither ustar's, GNU's nor v7's", offset)


def header_name(header: bytes) -> str:
    """The member name a header's own fields give (prefix joined when the magic is ustar's)."""
    raw = header[NAME[0] : NAME[1]].split(b"\0", 1)[0]
    if header[MAGIC[0] : MAGIC[0] + 5] == b"ustar" and header[PREFIX[0]] != 0:
        raw = header[PREFIX[0] : PREFIX[1]].split(b"\0", 1)[0] + b"/" + raw
    return raw.decode("utf-8", "surrogateescape")


def check_utf8_name(name: str, offset: int) -> None:
    """Keys become Spark strings: a name that is not UTF-8 is a defect of the shard, named here."""
    if name.isascii():
        return
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raw = name.encode("utf-8", "surrogateescape")
        raise TarFormatError(f"member name {raw!r} is not UTF-8", offset) from None


# -- the faults found between headers, and the WebDataset member rules (messages) --------------


def no_end_blocks(offset: int) -> TarFormatError:
    return TarFormatError("the tar ends without its end-of-archive blocks (truncated)", offset)


def truncated_header(got: int, offset: int) -> TarFormatError:
    return TarFormatError(f"truncated header ({got} of {BLOCK} bytes)", offset)


def lone_zero_block(offset: int) -> TarFormatError:
    return TarFormatError("a zero block is not followed by a second one", offset)


def not_regular(name: str, typeflag: bytes, offset: int) -> TarFormatError:
    return TarFormatError(f"member {name!r} is not a regular file (type {typeflag!r})", offset)


def unsafe_name(name: str, offset: int) -> TarFormatError:
    return TarFormatError(f"member name {name!r} is not a safe <key>.<field> name: {member_name_fault(name)}", offset)


def key_reappears(offset: int, key: str) -> TarFormatError:
    return TarFormatError("key reappears after another key (its members are not adjacent)", offset, key)


def field_twice(field: str, offset: int, key: str) -> TarFormatError:
    return TarFormatError(f"field {field!r} appears twice in one sample", offset, key)


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


_CHECKSUM_WEIGHTS = 8 ** np.arange(5, -1, -1, dtype=np.int64)
_MAGICS = np.frombuffer(b"".join(USTAR_MAGICS), np.uint64)
_USTAR = np.frombuffer(b"ustar", np.uint8)
_POSIX = np.frombuffer(POSIX_MAGIC, np.uint8)
_REGULAR = np.frombuffer(b"".join(REGULAR_TYPES), np.uint8)


def header_faults(headers: np.ndarray) -> np.ndarray:
    """Per (n, 512) header row: True where the fast paths cannot vouch for it (`check_header`'s rules
    and more: the exact parser judges those rows).

    A checksum not spelled as our writer does (6 octal digits, NUL,
    space) or not `header_checksum`; a magic not in USTAR_MAGICS; a type
    not in REGULAR_TYPES; a prefix in use.
    """
    stored = headers[:, CHECKSUM[0] : CHECKSUM[0] + 6] - np.uint8(48)
    faults = (stored > 7).any(axis=1) | (headers[:, CHECKSUM[0] + 6] != 0) | (headers[:, CHECKSUM[0] + 7] != 32)
    # uint32 holds a header's byte sum (at most 512 * 255) and numpy sums uint8 into it twice as fast as into int64
    computed = (
        headers.sum(axis=1, dtype=np.uint32).astype(np.int64)
        - headers[:, CHECKSUM[0] : CHECKSUM[1]].sum(axis=1, dtype=np.int64)
        + 8 * 32
    )
    faults |= stored.astype(np.int64) @ _CHECKSUM_WEIGHTS != computed
    types = headers[:, TYPEFLAG]
    faults |= ~((types == _REGULAR[0]) | (types == _REGULAR[1]) | (types == _REGULAR[2]))
    magic = headers[:, MAGIC[0] : MAGIC[1]]
    ustar = (magic == _POSIX).all(axis=1)  # what our writer writes: one compare, no copy
    if not ustar.all():  # GNU, v7 or damage: those few rows against every magic the rules read
        others = np.flatnonzero(~ustar)
        words = np.ascontiguousarray(magic[others]).view(np.uint64).reshape(-1)
        faults[others] |= ~np.isin(words, _MAGICS)
        ustar[others] = (magic[others, :5] == _USTAR).all(axis=1)  # GNU's: the prefix rule applies too
    faults |= ustar & (headers[:, PREFIX[0]] != 0)  # a prefix in use: the exact parser joins it
    return faults


def octal_size(raw: bytes) -> int | None:
    """One header's size field (12 bytes) if it has the one shape the fast paths read (`octal_sizes`), else None."""
    if raw[11] not in (0, 32) or raw[:11].translate(None, b"01234567"):
        return None
    return int(raw[:11], 8)


def octal_sizes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(valid, sizes) of (n, 512) header rows: valid where the size field is 11 octal digits and a NUL
    or a space, the one shape the fast paths read; anything else is for the exact parser."""
    digits = rows[:, SIZE[0] : SIZE[1] - 1] - np.uint8(48)
    valid = (digits < 8).all(axis=1) & ((rows[:, SIZE[1] - 1] == 0) | (rows[:, SIZE[1] - 1] == 32))
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


def end_of_archive(blocks: np.ndarray, stop: int) -> bool | None:
    """At block `stop` a header belongs and no octal size field is: True if the end-of-archive blocks
    (two zero blocks) are there, False if not (damage, a base-256 size, one zero block then more: the
    exact parser judges), None if a zero block is the last of `blocks` (the next block decides)."""
    if blocks[stop].any():
        return False
    if stop + 1 < len(blocks):
        return not blocks[stop + 1].any()
    return None


def header_chain(buffer: bytearray, blocks: np.ndarray, start: int, dense: bool) -> tuple[list[int], int, int]:
    """Blocks (from `start`) holding the headers found by following the size chain, and where it stopped.

    Returns (chain, stop, after): `stop` is the block where a header
    belongs but no octal size field is (a zero block, damage, a base-256
    size), or -1 when the chain ran past the last block; `after` is then
    the block of the next header (beyond `blocks`). `dense`: parse every
    block's size field with numpy at once (small members); else only the
    headers on the chain, in Python. Either way the size field must have
    the one shape `octal_sizes` reads.
    """
    chain: list[int] = []
    add = chain.append
    limit = len(blocks)
    i = start
    if not dense:
        while i < limit:
            at = i * BLOCK
            size = octal_size(buffer[at + SIZE[0] : at + SIZE[1]])
            if size is None:
                return chain, i, i
            add(i)
            i += blocks_after(size)
        return chain, -1, i
    valid, sizes = octal_sizes(blocks[start:])
    jumps_array = np.where(valid, blocks_after(sizes), 0)  # 0: no header here
    found = _chain_of_every_header(jumps_array, start)
    if found is not None:
        return found
    jumps = jumps_array.tolist()
    i = 0
    limit -= start
    while i < limit:
        step = jumps[i]
        if not step:
            return chain, start + i, start + i
        add(start + i)
        i += step
    return chain, -1, start + i


def _chain_of_every_header(jumps: np.ndarray, start: int) -> tuple[list[int], int, int] | None:
    """`header_chain`'s answer when the blocks with a size field (jumps > 0) are exactly the chain
    from the first block (the usual case: payload blocks hold no octal size field); else None, and
    the chain is followed block by block. Checked all at once: no Python step a member."""
    candidates = np.flatnonzero(jumps)
    if not len(candidates) or candidates[0] != 0:
        return None
    steps = jumps[candidates]
    if not np.array_equal(candidates[1:], candidates[:-1] + steps[:-1]):
        return None
    after = int(candidates[-1] + steps[-1])  # no size field there (every one is a candidate), or past the end
    chain = (candidates + start).tolist()
    if after < len(jumps):
        return chain, start + after, start + after
    return chain, -1, start + after
