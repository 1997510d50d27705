"""Fuzzing keys and field names through the format layer (docs/design.md "WebDataset rules we write by",
"Paths are checked before anything is created"; issue 29's fuzzers).

Every input gets a typed error (InvalidKey, InvalidField, InvalidMemberName) or a correct result:
the rule's two spellings agree (`key_error` in Python, INVALID_KEY_PATTERN in RE2, which the writer
and the validator's scan use), and a valid key and field go through the tar writer and come back
the same through the validator's scan, the reader's fast path, the exact parser, webdataset's own
splitting regex and wids' `splitname`. Derandomized, a few seconds; counts asserted.
"""

from __future__ import annotations

import io
import re
import time

import pyarrow as pa
import pyarrow.compute as pc
import wids.wids
from hypothesis import given
from hypothesis import strategies as st

from spark_webdataset.errors import InvalidField, InvalidKey, InvalidMemberName, WebDatasetError
from spark_webdataset.format.fast_read import read_sample_batches
from spark_webdataset.format.fast_verify import scan_shard
from spark_webdataset.format.names import (
    INVALID_KEY_PATTERN,
    KEY_COLUMN,
    MEMBER_NAME,
    check_fields,
    field_error,
    field_name_error,
    key_error,
    member_name,
    member_name_error,
    split_member_name,
)
from spark_webdataset.format.sample_reader import iter_samples
from spark_webdataset.format.shard_writer import ShardWriter
from tests.model.fuzzing import fuzz_settings
from tests.support.python_memory import PythonPeak

FUZZ = fuzz_settings(200)
SECONDS_PER_INPUT = 5.0  # generous: 2 cores shared by the whole suite
PEAK_BYTES = 32 << 20  # Python-side allocations of one input (tracemalloc)
WEBDATASET_SPLIT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # DESIGN.md's, as webdataset spells it
_INVALID = re.compile(INVALID_KEY_PATTERN)

CONTROL = st.characters(min_codepoint=0, max_codepoint=0x1F) | st.just("\x7f")
TRICKY = st.sampled_from(["/", ".", "..", "__", "_", "-", " ", "\n", "\x00", "é", "Ω", "\u200b", "０", "𝟘", "\ud7ff"])
PART = st.one_of(
    st.text(st.characters(codec="ascii"), max_size=12),
    st.text(max_size=8),
    st.sampled_from(["", ".", "..", "__x__", "__key__", "_x_", "a.b", "x", "__", "____", ".hidden"]),
    st.lists(TRICKY | CONTROL | st.characters(codec="ascii"), max_size=6).map("".join),
)
KEYS = st.one_of(
    st.from_regex(r"[A-Za-z0-9_~ -]{1,10}(/[A-Za-z0-9_.é-]{1,10}){0,3}", fullmatch=True),  # mostly valid
    st.lists(PART, min_size=1, max_size=5).map("/".join),
    st.text(max_size=40),
    st.text(st.characters(codec="ascii"), min_size=90, max_size=130),  # around the 100-byte USTAR name
)
FIELDS = st.one_of(
    st.sampled_from(["txt", "seg.png", "cls", "json", "__key__", "__url__", "TXT", "a/b", ".x", "", "x.", "zählung"]),
    st.text(st.characters(codec="ascii"), max_size=10),
    st.text(max_size=6),
    st.lists(st.characters(codec="ascii") | CONTROL, max_size=5).map("".join),
)


class Counts:
    def __init__(self) -> None:
        self.tried = self.typed = self.round_trips = 0


class Bounded:
    """One input's wall time and Python-side memory peak, asserted on exit."""

    def __enter__(self) -> Bounded:
        self.memory = PythonPeak().__enter__()
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        self.memory.__exit__(*exc)
        assert time.monotonic() - self.start < SECONDS_PER_INPUT
        assert self.memory.peak < PEAK_BYTES, self.memory.peak


def written(keys: list[str], field: str, allow_pax: bool) -> bytes:
    """One shard from the real ShardWriter: `keys` with one binary field holding each key's bytes."""
    sink = io.BytesIO()

    class Keep(io.BytesIO):
        def close(self) -> None:
            sink.write(self.getvalue())
            super().close()

    writer = ShardWriter([field], lambda index: Keep(), 1 << 30, allow_pax=allow_pax)
    payload = pa.array([key.encode("utf-8", "surrogatepass") for key in keys], pa.large_binary())
    try:
        writer.write_batch(pa.array(keys, pa.string()), [payload])
        writer.close()
    except BaseException:
        writer.discard()
        raise
    return sink.getvalue()


def check_round_trip(keys: list[str], field: str, counts: Counts) -> None:
    """`keys` (valid, distinct, sorted) and `field` (valid) through the writer and back through every reader."""
    try:
        data = written(keys, field, allow_pax=False)
        portable = True
    except (InvalidMemberName, InvalidField) as error:  # non-ASCII or over 100 bytes: not for a portable header
        counts.typed += 1
        if isinstance(error, InvalidField):
            assert field_name_error(field, allow_pax=False), error
        else:
            assert any(member_name_error(member_name(k, field), False) for k in keys), error
        data = written(keys, field, allow_pax=True)
        portable = False
    samples = list(iter_samples(io.BytesIO(data)))
    assert [s.key for s in samples] == keys
    assert all(s.fields == {field: key.encode()} for s, key in zip(samples, keys))
    got_keys: list[str] = []
    got_values: list[bytes] = []
    for batch in read_sample_batches(io.BytesIO(data), [field]):
        got_keys += batch.keys.to_pylist()
        got_values += batch.columns[field].to_pylist()
    assert got_keys == keys and got_values == [k.encode() for k in keys]
    scan = scan_shard(io.BytesIO(data))
    if portable:  # the validator's fast path vouches for every portable shard of valid keys
        assert scan is not None and scan.keys == keys
    else:
        assert scan is None or scan.keys == keys
    counts.round_trips += 1


def test_keys_are_refused_with_a_typed_error_or_round_trip_through_every_reader() -> None:
    counts = Counts()

    @FUZZ
    @given(st.lists(KEYS, min_size=1, max_size=4, unique=True), st.sampled_from(["txt", "seg.png", "cls"]))
    def one(keys: list[str], field: str) -> None:
        counts.tried += 1
        with Bounded():
            problems = [key_error(key) for key in keys]
            for key, problem in zip(keys, problems):
                # the rule's spellings agree: Python's, the RE2 pattern the writer and the scan use
                assert (problem is not None) == bool(_INVALID.search(key)), (key, problem)
                rejected = pc.match_substring_regex(pa.array([key], pa.string()), INVALID_KEY_PATTERN)[0].as_py()
                assert (problem is not None) == rejected, (key, problem)
                if problem is None:
                    name = member_name(key, field)
                    assert split_member_name(name) == (key, field)
                    assert WEBDATASET_SPLIT.match(name).groups() == (key, field)
                    assert wids.wids.splitname(name) == (key, "." + field)
                    assert not any(ord(c) < 32 or ord(c) == 127 for c in key)
            if any(problems):
                bad = next(key for key, problem in zip(keys, problems) if problem)
                try:
                    written(keys, field, allow_pax=True)
                except InvalidKey as error:
                    counts.typed += 1
                    assert repr(bad) in str(error)
                    return
                raise AssertionError(f"the writer accepted the invalid key {bad!r}")
            check_round_trip(sorted(keys), field, counts)

    one()
    print(f"keys: {counts.tried} inputs, {counts.typed} typed errors, {counts.round_trips} round trips")
    assert counts.tried > 0 and counts.typed > 0 and counts.round_trips > 0


def test_field_names_are_refused_with_a_typed_error_or_round_trip() -> None:
    counts = Counts()

    @FUZZ
    @given(FIELDS)
    def one(field: str) -> None:
        counts.tried += 1
        with Bounded():
            problem = field_error(field)
            try:
                fields = check_fields([KEY_COLUMN, field])
            except InvalidField as error:
                counts.typed += 1
                assert problem is not None or field == KEY_COLUMN, (field, error)
                assert repr(field) in str(error)
                if problem is not None:  # the tar writer holds the rule too, whoever calls it
                    try:
                        ShardWriter([field], lambda index: io.BytesIO(), 1 << 20, allow_pax=True)
                    except InvalidField:
                        counts.typed += 1
                    else:
                        raise AssertionError(f"the tar writer accepted the field {field!r}: {problem}")
                return
            assert problem is None and fields == [field]
            assert not any(ord(c) < 32 or ord(c) == 127 for c in field)
            if field_name_error(field, allow_pax=False):
                try:
                    ShardWriter([field], lambda index: io.BytesIO(), 1 << 20)
                except InvalidField:
                    counts.typed += 1
                else:
                    raise AssertionError(f"the portable writer accepted the field {field!r}")
            try:
                check_round_trip(["a", "b/c"], field, counts)
            except WebDatasetError:
                counts.typed += 1
                raise

    one()
    print(f"fields: {counts.tried} inputs, {counts.typed} typed errors, {counts.round_trips} round trips")
    assert counts.tried > 0 and counts.typed > 0 and counts.round_trips > 0


def test_member_names_split_as_webdataset_splits_them() -> None:
    """Any text: the project's split is webdataset's regex, and a name it splits is built back by `member_name`."""
    counts = Counts()

    @FUZZ
    @given(st.one_of(st.text(max_size=30), st.lists(KEYS | FIELDS, min_size=1, max_size=3).map(".".join)))
    def one(name: str) -> None:
        counts.tried += 1
        parts = split_member_name(name)
        match = MEMBER_NAME.match(name)
        assert (parts is None) == (match is None)
        if parts is None:
            counts.typed += 1  # no <key>.<field> shape: the parsers raise TarFormatError on it
            return
        assert parts == WEBDATASET_SPLIT.match(name).groups() and member_name(*parts) == name
        counts.round_trips += 1

    one()
    assert counts.tried > 0 and counts.typed > 0 and counts.round_trips > 0
