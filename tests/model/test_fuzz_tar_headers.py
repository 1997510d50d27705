"""Fuzzing tar headers (issue 29's fuzzers; the rules: format/tar_rules.py).

Valid tars (our writer's portable and PAX shards, tarfile's USTAR, GNU and PAX tars) and the hostile
corpus (tests/unit/format/test_tar_rules_book.CORPUS, tests/support/tars.py) get bytes changed where
the rules look (name, size, checksum, type flag, magic, prefix, PAX records; the checksum made right
again or not), are cut short or grown, and go to every parser of a shard: the exact parser, the
reader's fast path (seekable and pipe), the validator's scan and `check_shard`. Each says a
WebDatasetError (TarFormatError and its kin) or parses, never another exception; they agree (one
error, at one offset, or the same samples); a shard the scan vouches for parses to the same keys;
time and memory stay bounded whatever a size field claims.
"""

from __future__ import annotations

import io
import tarfile
import time

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from spark_webdataset.errors import TarFormatError, WebDatasetError
from spark_webdataset.format.fast_read import read_sample_batches
from spark_webdataset.format.fast_verify import scan_shard
from spark_webdataset.format.names import control_error, key_error
from spark_webdataset.format.sample_reader import iter_samples
from spark_webdataset.format.shard_writer import ShardWriter
from spark_webdataset.format.verify import check_shard
from tests.model.fuzzing import fuzz_settings
from tests.support.python_memory import PythonPeak
from tests.support.tars import (
    END,
    GOOD,
    Pipe,
    bogus_pax_length,
    huge_base256,
    member,
    pax,
    pax_record,
    pax_size_past_the_end,
)
from tests.unit.format.test_tar_rules_book import CORPUS

FUZZ = fuzz_settings(300)
BLOCK = 512
SECONDS_PER_INPUT = 5.0
PEAK_BYTES = 48 << 20  # the fast reader's 8 MiB chunk and the scan's 2 MiB, with room; never a claimed size
MAX_MEMBER = 1 << 20  # a small maximum member size: sizes past it must be refused, not allocated
FIELDS = ("txt", "cls")
# (start, end) of the header fields the rules read
REGIONS = {"name": (0, 100), "size": (124, 136), "checksum": (148, 156), "typeflag": (156, 157),
           "magic": (257, 265), "prefix": (345, 500), "mode..mtime": (100, 148), "anywhere": (0, 512)}  # fmt: skip


def ours(keys: list[str], allow_pax: bool = False) -> bytes:
    shards: list[bytes] = []

    class Keep(io.BytesIO):
        def close(self) -> None:
            shards.append(self.getvalue())
            super().close()

    writer = ShardWriter(list(FIELDS), lambda index: Keep(), 1 << 30, allow_pax=allow_pax)
    writer.write_batch(
        pa.array(keys),
        [
            pa.array([k.encode() * 3 for k in keys], pa.large_binary()),
            pa.array([str(i).encode() for i in range(len(keys))], pa.large_binary()),
        ],
    )
    writer.close()
    return shards[0]


def tarfile_made(form: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=form) as tar:
        for name, data in (
            ("a.txt", b"one"),
            ("a.cls", b"1"),
            ("p" * 60 + "/" + "x" * 80 + ".txt", b"long"),
            ("e.txt", b""),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


BASES = {
    "ours": ours(["a", "b/c", "d"]),
    "ours, pax": ours(["a", "ü/" + "x" * 120, "z"], allow_pax=True),
    "tarfile gnu": tarfile_made(tarfile.GNU_FORMAT),
    "tarfile pax": tarfile_made(tarfile.PAX_FORMAT),
    "tarfile ustar": tarfile_made(tarfile.USTAR_FORMAT),  # the long name in the prefix field
    "a large member": GOOD + member("b.txt", b"x" * 700) + END,
    "pax size and path": GOOD
    + pax(pax_record("path", "b.txt") + pax_record("size", "3"))
    + member("b.txt", b"abc")
    + END,
    "huge base-256": huge_base256(),
    "bogus pax length": bogus_pax_length(),
    "pax size past the end": pax_size_past_the_end(),
    **{f"corpus: {name}": case[0] for name, case in CORPUS.items()},
}
BYTE = st.one_of(
    st.integers(0, 255),
    st.sampled_from([ord(c) for c in "0178 x/.\n="] + [0, 0x80, 0xFF, 0x7F]),
)


def fixed_checksum(data: bytearray, header: int) -> None:
    block = data[header : header + BLOCK]
    if len(block) == BLOCK:
        block[148:156] = b" " * 8
        data[header + 148 : header + 156] = b"%06o\0 " % sum(block)


class Mutant:
    """A base tar and what was done to it: a short, replayable description (Hypothesis prints it)."""

    def __init__(self, base: str, edits: list[tuple[int, list[int], bool]], cut: tuple[str, int]) -> None:
        self.base, self.edits, self.cut = base, edits, cut
        data = bytearray(BASES[base])
        for at, values, fix in edits:
            for i, value in enumerate(values):
                if at + i < len(data):
                    data[at + i] = value
            if fix:
                fixed_checksum(data, at - at % BLOCK)  # past the checksum: the rules behind it get the bytes
        how, size = cut
        if how == "truncate":
            data = data[:size]
        elif how == "grow":
            data += bytes(size)
        self.data = bytes(data)

    def __repr__(self) -> str:
        return f"Mutant({self.base!r}, {self.edits!r}, {self.cut!r})"


@st.composite
def mutated(draw) -> Mutant:
    base = draw(st.sampled_from(sorted(BASES)))
    size = len(BASES[base])
    blocks = max(1, size // BLOCK)
    edits = []
    for _ in range(draw(st.integers(0, 3))):  # none: the base itself (valid ones must be read alike)
        header = draw(st.integers(0, blocks - 1)) * BLOCK
        start, end = REGIONS[draw(st.sampled_from(sorted(REGIONS)))]
        edits.append(
            (
                header + draw(st.integers(start, end - 1)),
                draw(st.lists(BYTE, min_size=1, max_size=12)),
                draw(st.booleans()),
            )
        )
    how = draw(st.sampled_from(["keep", "keep", "keep", "truncate", "grow"]))
    amount = (
        draw(st.integers(0, size)) if how == "truncate" else draw(st.sampled_from([1, BLOCK, 2 * BLOCK, 3 * BLOCK]))
    )
    return Mutant(base, edits, (how, amount))


def verdict(call):
    """('ok', result) or ('error', (type name, message, offset)) for a WebDatasetError; anything else fails."""
    try:
        return "ok", call()
    except WebDatasetError as error:
        assert isinstance(error, TarFormatError), error  # a tar's fault is a TarFormatError (or its kin)
        return "error", (error.message, error.offset)


def samples_of(data: bytes) -> list[tuple[str, dict]]:
    """Every sample's key and every field (the exact parser)."""
    return [(s.key, dict(s.fields)) for s in iter_samples(io.BytesIO(data), max_member=MAX_MEMBER)]


def projected(said):
    """A verdict with each sample's fields cut to FIELDS (the fast reader's columns)."""
    if said[0] != "ok":
        return said
    return "ok", [(key, {f: fields.get(f) for f in FIELDS}) for key, fields in said[1]]


def batches_of(stream, shard_bytes: int | None = None, chunk: int = 4 * BLOCK) -> list[tuple[str, dict]]:
    rows = []
    for batch in read_sample_batches(stream, list(FIELDS), chunk, shard_bytes=shard_bytes, max_member=MAX_MEMBER):
        columns = {f: batch.columns[f].to_pylist() for f in FIELDS}
        rows += [(key, {f: columns[f][i] for f in FIELDS}) for i, key in enumerate(batch.keys.to_pylist())]
    return rows


def test_mutated_tars_get_a_tar_error_or_the_same_parse_from_every_parser() -> None:
    tried = typed = parsed = vouched = 0

    @FUZZ
    @given(mutated())
    def one(mutant: Mutant) -> None:
        nonlocal tried, typed, parsed, vouched
        tried += 1
        data = mutant.data
        start = time.monotonic()
        with PythonPeak() as measured:
            exact = verdict(lambda: samples_of(data))
            said = {
                "fast": verdict(lambda: batches_of(io.BytesIO(data))),
                "fast, 8 MiB": verdict(lambda: batches_of(io.BytesIO(data), chunk=8 << 20)),
                "fast, pipe": verdict(lambda: batches_of(io.BufferedReader(Pipe(data)), shard_bytes=len(data))),
            }
            scan = scan_shard(io.BytesIO(data), max_member=MAX_MEMBER)
            report = check_shard("x.tar", lambda: io.BytesIO(data), None, (), len(data), MAX_MEMBER)
        assert time.monotonic() - start < SECONDS_PER_INPUT
        assert measured.peak < PEAK_BYTES, measured.peak
        for name, other in said.items():
            assert other == projected(exact), (name, other, exact)
        listed = [e["error"] for e in report.errors]
        assert listed[-1] == "shard is present but not listed in the manifest"  # expected=None: always said
        if exact[0] == "error":
            typed += 1
            assert scan is None
            message, offset = exact[1]
            assert report.errors[0]["error"] == message and report.errors[0]["offset"] == offset
            return
        parsed += 1
        keys = [key for key, _ in exact[1]]
        assert report.keys == keys and report.samples == len(keys) and report.bytes == len(data)
        broken = [key for key, fields in exact[1] if key_error(key) or any(control_error(f) for f in fields)]
        if scan is not None:  # the validator's scan vouches only for a shard the exact parser reads alike
            vouched += 1
            assert scan.keys == keys and not broken and scan.bytes == len(data)
        elif not broken:
            assert len(listed) == 1, listed  # valid after all: only "not listed in the manifest"
        else:
            assert len(listed) > 1 and {e["key"] for e in report.errors[:-1]} <= set(broken), listed

    one()
    print(f"tar headers: {tried} inputs, {typed} typed errors, {parsed} parsed, {vouched} vouched by the scan")
    assert tried > 0 and typed > 0 and parsed > 0 and vouched > 0
