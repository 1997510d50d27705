"""Reading tars other tools write, and damaged ones: the exact parser and the fast scan.

The exact parser (`iter_members`/`iter_samples`) must read every header
shape other tools write (GNU base-256 sizes and long names, USTAR prefixes,
PAX paths) and name the offset of any damage. The fast scan (`scan_shard`)
must never vouch for a shard it is not sure of: for each odd or damaged
shard here it answers None, and on valid shards it agrees with the exact
parser on keys, bytes and sha256, also where a header, a payload or the
end-of-archive blocks straddle its 2 MiB chunks.
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from spark_webdataset.errors import TarFormatError
from spark_webdataset.format import ustar
from spark_webdataset.format.fast_verify import CHUNK_BYTES, scan_shard
from spark_webdataset.format.names import key_error
from spark_webdataset.format.sample_reader import iter_members, iter_samples
from tests.support.helpers import tar_by_tarfile
from tests.support.tars import END, member, with_field


def samples(data: bytes, fields: set[str] | None = None) -> list:
    return list(iter_samples(io.BytesIO(data), fields))


def scan_keys(data: bytes, required: tuple[str, ...] = ()) -> list[str] | None:
    found = scan_shard(io.BytesIO(data), required)
    return None if found is None else found.keys


# -- the exact parser: headers other tools write ---------------------------------------------------


def test_gnu_base256_size_is_read_and_the_scan_defers() -> None:
    """GNU tar writes sizes of 8 GiB and more in base-256; the parser reads any size spelled so."""
    payload = b"p" * 700
    header = with_field(member("a.bin", payload)[: ustar.BLOCK], 124, b"\x80" + len(payload).to_bytes(11, "big"))
    data = header + payload + bytes(ustar.padding(len(payload))) + member("a.txt", b"t") + END
    [only] = samples(data)
    assert (only.key, only.fields) == ("a", {"bin": payload, "txt": b"t"})
    assert scan_keys(data) is None  # not an octal size: the exact parser must read it


def test_an_empty_size_field_is_a_zero_byte_member() -> None:
    """Some writers leave the size of an empty member blank (all NUL); that is size 0, not damage."""
    header = with_field(member("a.txt", b"")[: ustar.BLOCK], 124, bytes(12))
    [only] = samples(header + member("a.cls", b"3") + END)
    assert only.fields == {"txt": b"", "cls": b"3"}


def test_gnu_long_names_give_the_full_key_and_the_sample_starts_at_the_long_name_header() -> None:
    key = "k" * 120
    data = tar_by_tarfile([("first.txt", b"1"), (key + ".txt", b"2")], tarfile.GNU_FORMAT)
    _, second = samples(data)
    assert second.key == key and second.fields == {"txt": b"2"}
    assert second.offset == 1024  # the ././@LongLink header, not the member's own header after it
    assert scan_keys(data) is None


def test_a_ustar_prefix_is_joined_to_the_name() -> None:
    """tarfile splits a long path into the USTAR prefix and name fields; readers join them with '/'."""
    key = "d" * 60 + "/" + "e" * 50
    data = tar_by_tarfile([(key + ".txt", b"x")])
    assert data[345] != 0  # the prefix field is really used
    [only] = samples(data)
    assert only.key == key
    assert scan_keys(data) is None


def test_a_pax_path_overrides_the_ustar_name() -> None:
    data = tar_by_tarfile([("ключ.txt", b"x"), ("ключ.cls", b"1")], tarfile.PAX_FORMAT)
    [only] = samples(data)
    assert (only.key, only.fields) == ("ключ", {"txt": b"x", "cls": b"1"})
    assert scan_keys(data) is None


# -- the exact parser: damage, named with its offset -----------------------------------------------


def test_a_pax_record_without_a_length_is_an_error_at_its_header() -> None:
    records = b"path=a.txt\n"  # no "<length> " in front
    pax = member("././@PaxHeader", records, typeflag=b"x")
    with pytest.raises(TarFormatError, match="PAX record has no length") as error:
        samples(member("z.txt", b"1") + pax + member("a.txt", b"2") + END)
    assert error.value.offset == 1024


def test_a_pax_header_cut_short_is_truncated_inside_an_extended_header() -> None:
    records = b"30 path=" + b"a" * 17 + b".txt\n"
    pax = member("././@PaxHeader", records, typeflag=b"x")
    with pytest.raises(TarFormatError, match="truncated inside an extended header") as error:
        samples(pax[: ustar.BLOCK + 10])
    assert error.value.offset == 0


def test_a_tar_without_end_blocks_is_truncated_at_its_end() -> None:
    data = member("a.txt", b"1") + member("b.txt", b"2")
    with pytest.raises(TarFormatError, match="without its end-of-archive blocks") as error:
        samples(data)
    assert error.value.offset == len(data)


def test_a_single_zero_block_followed_by_a_member_is_damage() -> None:
    data = member("a.txt", b"1") + bytes(ustar.BLOCK) + member("b.txt", b"2") + END
    with pytest.raises(TarFormatError, match="zero block is not followed by a second one") as error:
        samples(data)
    assert error.value.offset == 1024
    assert scan_keys(data) is None


def test_a_header_whose_checksum_does_not_match_names_its_offset() -> None:
    data = bytearray(member("a.txt", b"1") + member("b.txt", b"2") + END)
    data[1024] = ord("c")  # b.txt -> c.txt without fixing the checksum
    with pytest.raises(TarFormatError, match="header checksum .* does not match") as error:
        samples(bytes(data))
    assert error.value.offset == 1024
    assert scan_keys(bytes(data)) is None


def test_non_seekable_streams_skip_unwanted_payloads_by_reading(tmp_path: Path) -> None:
    """A pipe cannot seek: payloads of fields not asked for are read past, and truncation still shows."""
    big = bytes(range(256)) * 5000
    data = member("a.bin", big) + member("a.txt", b"one") + member("b.bin", big) + member("b.txt", b"two") + END
    path = tmp_path / "piped.tar"
    path.write_bytes(data)
    with subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE) as pipe:
        assert pipe.stdout is not None and not pipe.stdout.seekable()
        got = [(s.key, s.fields) for s in iter_samples(pipe.stdout, fields={"txt"})]
    assert got == [("a", {"bin": None, "txt": b"one"}), ("b", {"bin": None, "txt": b"two"})]

    path.write_bytes(data[: 2 * ustar.BLOCK + 1000])  # cut inside a.bin's payload
    with subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE) as pipe:
        assert pipe.stdout is not None
        with pytest.raises(TarFormatError, match=r"member 'a.bin' is truncated \(1512 of") as error:
            list(iter_samples(pipe.stdout, fields={"txt"}))
    assert error.value.offset == 0


def test_skipping_on_a_seekable_stream_stops_at_its_end() -> None:
    data = member("a.bin", b"x" * 5000)[:2000]
    with pytest.raises(TarFormatError, match=r"truncated \(1488 of 5120 bytes\)"):
        list(iter_members(io.BytesIO(data), read_data=False))


# -- the fast scan: says None where it cannot vouch ------------------------------------------------


def test_scan_defers_a_checksum_spelled_with_seven_digits_which_the_parser_accepts() -> None:
    """Some tools write the checksum as 7 digits and a NUL; valid, but not the shape the scan checks."""
    header = bytearray(member("a.txt", b"1")[: ustar.BLOCK])
    checksum = int(header[148:154], 8)
    header[148:156] = b"%07o\0" % checksum
    data = bytes(header) + member("a.txt", b"1")[ustar.BLOCK :] + END
    assert [s.key for s in samples(data)] == ["a"]
    assert scan_keys(data) is None


@pytest.mark.parametrize(
    "name",
    [
        "abc",  # no dot at all
        "d/.txt",  # the last path part starts with the dot
        "x\ny.txt",  # MEMBER_NAME's '.*' stops at a newline
    ],
    ids=["no dot", "dot after slash", "newline"],
)
def test_scan_defers_names_it_cannot_split_like_the_regex(name: str) -> None:
    data = member(name, b"1") + END
    assert scan_keys(data) is None
    if name == "abc":
        with pytest.raises(TarFormatError, match="not a safe <key>.<field> name"):
            samples(data)
    elif name == "d/.txt":
        [only] = samples(data)
        assert key_error(only.key) == "the key ends with '/' (its last path part is empty)"
    else:
        assert [s.key for s in samples(data)] == ["x\ny"]


def test_scan_defers_keys_that_are_not_utf8() -> None:
    data = member(b"\xff\xfe.txt", b"1") + END
    assert scan_keys(data) is None


def test_scan_defers_a_shard_with_more_fields_than_its_bit_set_holds() -> None:
    data = b"".join(member(f"a.f{i}", b"1") for i in range(63)) + END
    assert scan_keys(data) is None
    [only] = samples(data)
    assert len(only.fields) == 63


def test_scan_defers_a_required_field_no_sample_has() -> None:
    data = member("a.txt", b"1") + member("b.txt", b"2") + END
    assert scan_keys(data, ("txt",)) == ["a", "b"]
    assert scan_keys(data, ("cls",)) is None


def test_scan_reads_field_names_longer_than_eight_bytes() -> None:
    """Fields of more than 8 bytes take the row-table path; a repeated one is still caught."""
    data = (
        member("a.segmentation.png", b"1")
        + member("a.txt", b"2")
        + member("b.segmentation.png", b"3")
        + member("b.depth.exr.zst", b"4")
        + END
    )
    found = scan_shard(io.BytesIO(data))
    assert found is not None
    assert (found.keys, found.bytes, found.sha256) == (
        ["a", "b"],
        len(data),
        hashlib.sha256(data).hexdigest(),
    )
    twice = member("a.segmentation.png", b"1") + member("a.segmentation.png", b"2") + END
    assert scan_keys(twice) is None
    with pytest.raises(TarFormatError, match="'segmentation.png' appears twice"):
        samples(twice)


# -- the fast scan across its chunks ---------------------------------------------------------------

ALMOST_A_CHUNK = member("a.bin", bytes(CHUNK_BYTES - 2 * ustar.BLOCK))  # header + payload: one block short


VALID_LAYOUTS = {
    # the first end block is the last block of chunk 1, the second starts chunk 2
    "end blocks straddle two chunks": (ALMOST_A_CHUNK + END, ["a"]),
    # chunk 2 is payload only, no header in it
    "a payload spans whole chunks": (
        member("a.bin", bytes(3 * CHUNK_BYTES)) + member("b.txt", b"b") + END,
        ["a", "b"],
    ),
    # GNU tar pads to its record size; whole chunks after the end are hashed, not parsed
    "chunks of padding after the end": (member("a.txt", b"1") + END + bytes(3 * CHUNK_BYTES), ["a"]),
    # more headers than one check takes at once
    "5000 small members": (b"".join(member(f"{i:05d}.txt", b"x") for i in range(5000)) + END, None),
}


@pytest.mark.parametrize("layout", VALID_LAYOUTS)
def test_scan_agrees_with_the_parser_across_chunk_boundaries(layout: str) -> None:
    data, keys = VALID_LAYOUTS[layout]
    expected = [s.key for s in samples(data)]
    assert keys is None or expected == keys
    found = scan_shard(io.BytesIO(data))
    assert found is not None
    assert found.keys == expected
    assert (found.bytes, found.sha256) == (len(data), hashlib.sha256(data).hexdigest())


DAMAGED_LAYOUTS = {
    "one zero block ends chunk 1, chunk 2 starts with a header": (
        ALMOST_A_CHUNK + bytes(ustar.BLOCK) + member("b.txt", b"b") + END,
        "zero block is not followed by a second one",
    ),
    "one zero block ends chunk 1 and the tar": (
        ALMOST_A_CHUNK + bytes(ustar.BLOCK),
        "zero block is not followed",
    ),
    "cut inside a payload, not on a block": (
        member("a.bin", bytes(3 * CHUNK_BYTES))[: 2 * CHUNK_BYTES + 100],
        "member 'a.bin' is truncated",
    ),
    "a header with a size that is not octal": (
        member("a.txt", b"1") + with_field(member("b.txt", b"2"), 124, b"12x4567\0"),
        "size field .* is not an octal number",
    ),
}


@pytest.mark.parametrize("layout", DAMAGED_LAYOUTS)
def test_scan_defers_damage_that_the_parser_names(layout: str) -> None:
    data, error = DAMAGED_LAYOUTS[layout]
    assert scan_shard(io.BytesIO(data)) is None
    with pytest.raises(TarFormatError, match=error):
        samples(data)


def test_a_member_name_that_is_not_utf8_is_damage_named_at_its_header(tmp_path: Path) -> None:
    """Keys become Spark strings: validation reports such a shard instead of crashing on it."""
    from spark_webdataset.dataset.validate import validate_version
    from spark_webdataset.format.manifest import Manifest, ShardEntry

    data = member("a.txt", b"x") + member(b"\xff.txt", b"y") + END
    with pytest.raises(TarFormatError, match=r"offset 1024: member name b'\\xff.txt' is not UTF-8"):
        samples(data)
    (tmp_path / "shard-000000.tar").write_bytes(data)
    entry = ShardEntry("shard-000000.tar", 2, len(data), "a", "a")
    (tmp_path / "_manifest.json").write_bytes(Manifest([entry], [{"name": "txt", "type": "string"}], {}).to_json())
    report = validate_version(str(tmp_path), workers=1, write_report=False)
    assert not report.ok
    assert [(e["shard"], e["offset"]) for e in report.errors] == [("shard-000000.tar", 1024)]
