"""One tar rulebook (issue 20): every header rule fails the same bytes the same way in all three parsers.

The rules live in `format.tar_rules` (and the name rules in `format.names`);
the exact parser applies them header by header, the reader's and the
validator's fast paths in their vectorized forms, handing any doubtful
header to the exact parser. For a corpus of malformed headers (checksum,
type flag, magic and version, names, the size chain, the end blocks,
grouping) the exact parser, the reader's fast path (seekable and pipe,
small and large chunks, keys only) and the validator must give the same
error type, message and offset (`one_verdict`, from tests/support/tars.py).
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from spark_webdataset.format import names, tar_rules, ustar
from spark_webdataset.format.fast_read import read_sample_batches
from spark_webdataset.format.fast_verify import scan_shard
from spark_webdataset.format.sample_reader import iter_samples
from tests.support.tars import BLOCK, END, GOOD, member, one_verdict, pax, pax_record, with_field


def raw_member(raw_name: bytes, data: bytes = b"2", typeflag: bytes = b"0") -> bytes:
    """A member whose name field holds `raw_name` as is (not UTF-8, say)."""
    header = ustar.build_header(ustar.header_template(0, typeflag), raw_name, len(data))
    return header + data + bytes(ustar.padding(len(data)))


def wrong_checksum(block_of: bytes) -> bytes:
    header = bytearray(block_of[:BLOCK])
    header[148:156] = b"%06o\0 " % (tar_rules.header_checksum(bytes(header)) + 1)
    return bytes(header) + block_of[BLOCK:]


B = member("b.txt", b"2")

CORPUS = {
    # the checksum
    "checksum off by one": (GOOD + wrong_checksum(B) + END, 1024, "header checksum", "does not match the header"),
    "checksum not octal": (
        GOOD + bytes(with_field(B, 0, b""))[:148] + b"12345x\0 " + B[156:] + END,
        1024,
        "the checksum field b'12345x\\x00 ' is not an octal number",
        None,
    ),
    # magic and version
    "bad magic": (GOOD + with_field(B, 257, b"ustaR\x0000") + END, 1024, "header magic and version", "neither"),
    "bad version": (GOOD + with_field(B, 257, b"ustar\x00xx") + END, 1024, "b'ustar\\x00xx'", None),
    "garbage magic": (GOOD + with_field(B, 257, b"\x01" * 8) + END, 1024, "header magic and version", None),
    "bad magic on a PAX header": (
        GOOD + with_field(pax(pax_record("path", "b.txt")), 257, b"USTAR\x0000") + B + END,
        1024,
        "header magic and version",
        None,
    ),
    # type flags: regular files only
    "hard link": (GOOD + member("b.txt", b"", typeflag=b"1") + END, 1024, "is not a regular file (type b'1')", None),
    "symlink": (
        GOOD + with_field(member("b.txt", b"", typeflag=b"2"), 157, b"a.txt") + END,
        1024,
        "member 'b.txt' is not a regular file (type b'2')",
        None,
    ),
    "directory": (GOOD + member("b/", b"", typeflag=b"5") + END, 1024, "is not a regular file (type b'5')", None),
    "unknown type": (GOOD + member("b.txt", b"2", typeflag=b"Z") + END, 1024, "(type b'Z')", None),
    "GNU long link name": (GOOD + member("b.txt", b"a.txt\0", typeflag=b"K") + END, 1024, "(type b'K')", None),
    # names: <key>.<field>, safe, UTF-8
    "parent path part": (GOOD + member("../b.txt", b"2") + END, 1024, "member name '../b.txt' is not a safe", None),
    "inner parent path part": (GOOD + member("a/../b.txt", b"2") + END, 1024, "is not a safe <key>.<field>", None),
    "absolute name": (GOOD + member("/b.txt", b"2") + END, 1024, "member name '/b.txt' is not a safe", None),
    "no field": (GOOD + member("b", b"2") + END, 1024, "member name 'b' is not a safe", None),
    "empty name before the dot": (GOOD + member(".txt", b"2") + END, 1024, "member name '.txt' is not a safe", None),
    "dot in a directory only": (GOOD + member("b.d/x", b"2") + END, 1024, "'b.d/x' is not a safe", None),
    "prefix with a parent part": (
        GOOD + with_field(B, 345, b"..") + END,
        1024,
        "member name '../b.txt' is not a safe",
        None,
    ),
    "PAX path absolute": (
        GOOD + pax(pax_record("path", "/etc/b.txt")) + B + END,
        1024,
        "member name '/etc/b.txt' is not a safe",
        None,
    ),
    "GNU long name with a parent part": (
        GOOD + member("././@LongLink", b"x/../../b.txt\0", typeflag=b"L") + B + END,
        1024,
        "member name 'x/../../b.txt' is not a safe",
        None,
    ),
    "name not UTF-8": (GOOD + raw_member(b"b\xff.txt") + END, 1024, "member name b'b\\xff.txt' is not UTF-8", None),
    # the end blocks and the size chain
    "one zero block, then a member": (
        GOOD + bytes(BLOCK) + B + END,
        1024,
        "a zero block is not followed by a second one",
        None,
    ),
    "no end blocks": (GOOD + B, 2048, "the tar ends without its end-of-archive blocks", None),
    "truncated header": (GOOD + B[:100], 1024, "truncated header (100 of 512 bytes)", None),
    "payload cut short": (GOOD + member("b.txt", b"x" * 2000)[:1500], 1024, "member 'b.txt' is truncated", None),
    # grouping
    "a field twice": (GOOD + B + B + END, 2048, "field 'txt' appears twice in one sample", None),
    "a key that comes back": (GOOD + B + member("a.txt", b"3") + END, 2048, "key reappears after another key", None),
}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_every_rule_fails_the_same_bytes_the_same_way_in_all_three_parsers(case: str) -> None:
    data, offset, rule, more = CORPUS[case]
    kind, message, at = one_verdict(data)
    assert at == offset, (case, message)
    assert rule in message and (more is None or more in message), (case, message)
    assert kind in ("TarFormatError", "MemberSizeError"), kind


def test_the_magics_the_rulebook_reads_are_read_alike_by_all_three() -> None:
    """POSIX ustar, GNU and v7 (no magic) headers: the same samples everywhere; the fast paths vouch."""
    for magic in tar_rules.USTAR_MAGICS:
        data = GOOD + with_field(B, 257, magic) + END
        exact = [(s.key, s.fields["txt"]) for s in iter_samples(io.BytesIO(data))]
        assert exact == [("a", b"first"), ("b", b"2")]
        [batch] = list(read_sample_batches(io.BytesIO(data), ["txt"]))
        assert list(zip(batch.keys.to_pylist(), batch.columns["txt"].to_pylist())) == exact
        assert scan_shard(io.BytesIO(data)) is not None
        rows = np.frombuffer(data[:BLOCK] + data[1024 : 1024 + BLOCK], np.uint8).reshape(2, BLOCK)
        assert not tar_rules.header_faults(rows).any()


def test_the_vectorized_rules_agree_with_the_scalar_ones() -> None:
    """header_faults flags every header check_header refuses; split_names every name member_parts refuses."""
    headers = [
        B[:BLOCK],
        wrong_checksum(B)[:BLOCK],
        with_field(B[:BLOCK], 257, b"ustaR\x0000"),
        with_field(B[:BLOCK], 156, b"2"),
    ]
    rows = np.frombuffer(b"".join(headers), np.uint8).reshape(len(headers), BLOCK)
    assert tar_rules.header_faults(rows).tolist() == [False, True, True, True]
    cases = ["a.txt", "../a.txt", "/a.txt", "a/../b.txt", "b", "a/.txt", "b.d/x", "k/x.tar.gz", "a..b.txt"]
    width = 16
    raw = np.zeros((len(cases), width), np.uint8)
    for row, name in enumerate(cases):
        raw[row, : len(name)] = np.frombuffer(name.encode(), np.uint8)
    lengths, dot, faults = names.split_names(raw)
    for row, name in enumerate(cases):
        parts = names.member_parts(name)
        if not faults[row]:  # the fast path vouches: the exact parser agrees, split included
            assert parts == (name[: dot[row]], name[dot[row] + 1 : lengths[row]]), name
        else:  # stricter is allowed (the exact parser judges): '..' anywhere, an empty last-part key
            assert parts is None or ".." in name or name == "a/.txt", name
