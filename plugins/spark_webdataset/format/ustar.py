"""USTAR headers filled into a fixed template, for one member or a whole batch.

`tarfile.TarInfo.tobuf` costs ~20 µs a member; filling a 512-byte template
with numpy for a whole batch of members costs about 1 µs each. Every field
but the name, size and checksum is the same for every member we write
(regular file, mode 0444, uid/gid 0, empty owner names, fixed mtime), so
the bytes are reproducible by construction.
"""

from __future__ import annotations

import numpy as np

from .tar_rules import BLOCK, MAGIC, POSIX_MAGIC

END_OF_ARCHIVE = bytes(2 * BLOCK)
MAX_USTAR_SIZE = 8**11 - 1  # 11 octal digits
_SIZE_SHIFTS = np.arange(10, -1, -1, dtype=np.int64) * 3
_CHKSUM_SHIFTS = np.arange(5, -1, -1, dtype=np.int64) * 3


def padding(size: int) -> int:
    return -size % BLOCK


def member_bytes(size: int) -> int:
    """Tar bytes one member of `size` payload bytes takes (header + padded data)."""
    return BLOCK + size + padding(size)


def _octal(value: int, digits: int) -> bytes:
    return b"%0*o" % (digits, value)


def header_template(mtime: int = 0, typeflag: bytes = b"0") -> np.ndarray:
    """A header with every constant field filled and name/size/chksum empty."""
    if not 0 <= mtime <= MAX_USTAR_SIZE:
        raise ValueError(f"option mtime={mtime} does not fit a USTAR header (0..{MAX_USTAR_SIZE})")
    header = bytearray(BLOCK)
    header[100:108] = b"0000444\0"  # mode
    header[108:116] = b"0000000\0"  # uid
    header[116:124] = b"0000000\0"  # gid
    header[136:148] = _octal(mtime, 11) + b"\0"
    header[148:156] = b" " * 8  # checksum is computed over spaces here
    header[156:157] = typeflag
    header[MAGIC[0] : MAGIC[1]] = POSIX_MAGIC  # magic "ustar\0", version "00"
    header[329:337] = b"0000000\0"  # devmajor
    header[337:345] = b"0000000\0"  # devminor
    return np.frombuffer(bytes(header), dtype=np.uint8)


def build_headers(
    template: np.ndarray, names: np.ndarray, sizes: np.ndarray, name_sums: np.ndarray | None = None
) -> np.ndarray:
    """Headers for many members at once.

    `names` is an (n, 100) uint8 array of NUL-padded member names, `sizes`
    an int64 array of payload sizes. Returns an (n, 512) uint8 array. The
    checksum is the template's constant part plus the name and size bytes
    (`name_sums`, the byte sums of the names, if the caller has them), so
    only those are summed, not all 512 bytes of every header.
    """
    count = len(sizes)
    headers = np.empty((count, BLOCK), dtype=np.uint8)
    headers[:] = template
    headers[:, :100] = names
    if name_sums is None:
        name_sums = names.sum(axis=1, dtype=np.int64)
    constant = int(template.sum(dtype=np.int64)) - int(template[:100].sum()) - int(template[124:136].sum())
    if count and int(sizes.min()) == int(sizes.max()):  # one size (a fixed-size field): its digits once
        digits = (((sizes[:1, None] >> _SIZE_SHIFTS) & 7) + 48).astype(np.uint8)
        checksums = name_sums + (constant + int(digits.sum(dtype=np.int64)))
    else:
        digits = (((sizes[:, None] >> _SIZE_SHIFTS) & 7) + 48).astype(np.uint8)
        checksums = constant + name_sums + digits.sum(axis=1, dtype=np.int64)
    headers[:, 124:135] = digits
    headers[:, 135] = 0
    headers[:, 148:154] = ((checksums[:, None] >> _CHKSUM_SHIFTS) & 7) + 48
    headers[:, 154] = 0
    headers[:, 155] = 32
    return headers


def build_header(template: np.ndarray, name: bytes, size: int) -> bytes:
    """One header; `name` must fit the 100-byte field (see pax_header otherwise)."""
    if len(name) > 100:
        raise ValueError(f"member name of {len(name)} bytes does not fit a USTAR header")
    if size > MAX_USTAR_SIZE:
        raise ValueError(f"a member of {size} bytes does not fit a USTAR header")
    names = np.zeros((1, 100), dtype=np.uint8)
    names[0, : len(name)] = np.frombuffer(name, dtype=np.uint8)
    return build_headers(template, names, np.array([size], dtype=np.int64)).tobytes()


def pax_member(mtime: int, name: str, size: int) -> bytes:
    """A PAX extended header carrying `name`, then the member's own header.

    Used only when the user opts into PAX (names over 100 bytes or not ASCII).
    """
    record_body = f" path={name}\n".encode()
    length = len(record_body)
    while len(str(length).encode()) + len(record_body) != length:
        length = len(str(length).encode()) + len(record_body)
    records = str(length).encode() + record_body
    pax_template = header_template(mtime, typeflag=b"x")
    pax = build_header(pax_template, b"././@PaxHeader", len(records))
    short = name.encode("utf-8")[:100]
    # the ustar name field holds an ASCII stand-in; readers take the PAX path.
    short = short.decode("ascii", "replace").encode("ascii", "replace")[:100]
    return pax + records + bytes(padding(len(records))) + build_header(header_template(mtime), short, size)
