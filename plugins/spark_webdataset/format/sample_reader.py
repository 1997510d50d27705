"""Streaming tar members and WebDataset samples, with offsets for error reports.

Our own header parser rather than `tarfile`: it streams (one pass, no
seeks), reports the byte offset of every problem, and costs a few µs a
member. It reads USTAR, PAX (`path`, `size`) and GNU long names and
base-256 sizes, as other tools write them, and holds every size to the
rules of `tar_rules` (within the shard, within the maximum member size)
before it reads a byte of the payload; grouping follows webdataset's `group_by_keys`: consecutive
members with the same key form one sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from . import tar_rules
from .names import member_parts, split_member_name
from .tar_rules import BLOCK, EXTENDED_TYPES, GNU_LONG_NAME_TYPE, PAX_GLOBAL_TYPE, PAX_TYPE, REGULAR_TYPES, ZERO_BLOCK

READ_PIECE_BYTES = 8 << 20  # a read of a size the shard's end does not bound goes in pieces this large


@dataclass
class TarMember:
    name: str
    offset: int  # of the member's first header (PAX/GNU header included)
    size: int
    typeflag: bytes
    data: bytes | None  # None when the caller asked not to read payloads
    end: int = 0  # where its payload's padding ends: the next member's offset

    @property
    def is_regular(self) -> bool:
        return self.typeflag in REGULAR_TYPES


@dataclass
class Sample:
    key: str
    offset: int  # of its first member's first header
    fields: dict[str, bytes | None] = field(default_factory=dict)
    end: int = 0  # where its last member ends: its bytes are [offset, end)


def iter_members(
    stream: BinaryIO,
    read_data: bool | Callable[[str], bool] = True,
    offset: int = 0,
    shard_bytes: int | None = None,
    max_member: int | str | None = None,
) -> Iterator[TarMember]:
    """Yield the members of a tar stream; raises TarFormatError with the offset on damage.

    `offset`: where in the tar the stream starts (at a header), for the
    offsets reported (the fast path hands over mid-shard). Every size is
    held to the rules of `tar_rules` before anything is read: the shard's
    end is the stream's when it can seek, else `shard_bytes` (the whole
    tar's size, in the same offsets) if given; `max_member`: the maximum
    member size (default: the configured one).
    """
    limit = tar_rules.max_member_bytes(max_member)
    long_name: str | None = None
    size_override: int | None = None  # from a PAX `size` record, for the next member
    member_offset: int | None = None
    end: int | None = None  # of the stream (its own positions), to seek over payloads
    tar_end = shard_bytes  # where the shard ends, in tar offsets
    left_now = tar_rules.remaining(stream)  # once, so skipping a payload is one relative seek
    if left_now is not None:
        end = stream.tell() + left_now
        tar_end = offset + left_now
    while True:
        header = stream.read(BLOCK)
        if len(header) == 0:
            raise tar_rules.no_end_blocks(offset)
        if len(header) < BLOCK:
            raise tar_rules.truncated_header(len(header), offset)
        if header == ZERO_BLOCK:
            if stream.read(BLOCK) != ZERO_BLOCK:
                raise tar_rules.lone_zero_block(offset)
            return
        tar_rules.check_header(header, offset)
        size_field = header[tar_rules.SIZE[0] : tar_rules.SIZE[1]]
        size = tar_rules.decode_number(size_field, offset, "size")
        source = "base-256" if size_field[0] & 0x80 else ""
        typeflag = header[tar_rules.TYPEFLAG : tar_rules.TYPEFLAG + 1]
        start = offset if member_offset is None else member_offset
        left = None if tar_end is None else tar_end - offset - BLOCK
        if typeflag in EXTENDED_TYPES:
            padded = tar_rules.check_extended_size(size, offset, left)
            body = _read(stream, padded, left is not None)
            if len(body) < padded:
                raise tar_rules.extended_truncated(len(body), padded, offset)
            payload = body[:size]
            if typeflag == PAX_TYPE:
                records = tar_rules.parse_pax(payload, offset)
                long_name = records.get("path", long_name)
                size_override = tar_rules.pax_size(records, offset)
            elif typeflag == GNU_LONG_NAME_TYPE:
                long_name = payload.rstrip(b"\0").decode("utf-8", "surrogateescape")
            else:
                tar_rules.parse_pax(payload, offset)  # global records: checked, not applied
            member_offset = start if typeflag != PAX_GLOBAL_TYPE else member_offset
            offset += BLOCK + padded
            continue
        name = tar_rules.header_name(header) if long_name is None else long_name
        if size_override is not None:
            size, source = size_override, "from a PAX record"
        padded = tar_rules.check_member_size(name, size, offset, left, limit, source)
        tar_rules.check_utf8_name(name, offset)
        wanted = read_data(name) if callable(read_data) else read_data
        if wanted or typeflag not in REGULAR_TYPES:
            body = _read(stream, padded, left is not None)
            if len(body) < padded:
                raise tar_rules.truncated(name, len(body), padded, offset, size, source)
            data = body[:size]
        else:
            skipped = _skip(stream, padded, end)
            if skipped < padded:
                raise tar_rules.truncated(name, skipped, padded, offset, size, source)
            data = None
        yield TarMember(name=name, offset=start, size=size, typeflag=typeflag, data=data, end=offset + BLOCK + padded)
        offset += BLOCK + padded
        long_name = None
        size_override = None
        member_offset = None


def _read(stream: BinaryIO, count: int, bounded: bool) -> bytes:
    """`count` bytes, or fewer at the stream's end. Unless the shard's end bounds `count` (`bounded`),
    read in pieces: a size no byte backs then costs what the stream really holds, not `count`."""
    if bounded or count <= READ_PIECE_BYTES:
        return stream.read(count)
    pieces = []
    while count > 0:
        piece = stream.read(min(count, READ_PIECE_BYTES))
        if not piece:
            break
        pieces.append(piece)
        count -= len(piece)
    return b"".join(pieces)


def _skip(stream: BinaryIO, count: int, end: int | None) -> int:
    if end is not None:
        here = stream.tell()
        stream.seek(min(here + count, end))
        return min(count, end - here)
    skipped = 0
    while skipped < count:
        chunk = stream.read(min(1 << 20, count - skipped))
        if not chunk:
            break
        skipped += len(chunk)
    return skipped


def iter_samples(
    stream: BinaryIO,
    fields: set[str] | None = None,
    offset: int = 0,
    finished: set[str] | None = None,
    shard_bytes: int | None = None,
    max_member: int | str | None = None,
) -> Iterator[Sample]:
    """Group members into samples by WebDataset's rule; strict about its shape.

    `fields`, if given, limits which payloads are read (others are None).
    `offset` and `finished` resume a read at a sample start: the tar offset
    the stream starts at, and the keys of the samples before it.
    Raises TarFormatError on non-regular members, names not of the
    `<key>.<field>` shape, a field twice in a sample, and a key that comes
    back after another key (members of a sample not adjacent).
    `shard_bytes`, `max_member`: as `iter_members` takes them.
    """
    current: Sample | None = None
    finished = set() if finished is None else finished

    def wanted(name: str) -> bool:
        parts = split_member_name(name)
        return fields is None or (parts is not None and parts[1] in fields)

    members = iter_members(stream, read_data=wanted, offset=offset, shard_bytes=shard_bytes, max_member=max_member)
    for member in members:
        if not member.is_regular:
            raise tar_rules.not_regular(member.name, member.typeflag, member.offset)
        parts = member_parts(member.name)
        if parts is None:
            raise tar_rules.unsafe_name(member.name, member.offset)
        key, ext = parts
        if current is None or key != current.key:
            if current is not None:
                finished.add(current.key)
                yield current
            if key in finished:
                raise tar_rules.key_reappears(member.offset, key)
            current = Sample(key=key, offset=member.offset)
        if ext in current.fields:
            raise tar_rules.field_twice(ext, member.offset, key)
        current.fields[ext] = member.data
        current.end = member.end
    if current is not None:
        yield current
