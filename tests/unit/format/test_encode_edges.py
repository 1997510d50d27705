"""The format core's rules at their edges: names, key runs, encode/decode, sizes, headers, errors.

Pure Python and Arrow, no Spark: each test checks one rule docs/design.md
("WebDataset rules we write by") fixes (an error that names the key, column, option or sample; a value
that survives a round trip) on real Arrow arrays and real tar bytes.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spark_webdataset.errors import (
    BadOption,
    DuplicateKey,
    InputError,
    InvalidField,
    InvalidKey,
    TarFormatError,
    WebDatasetError,
    from_spark,
)
from spark_webdataset.format import ustar
from spark_webdataset.format.decode import decode_column, parser_for
from spark_webdataset.format.encode import encode_column
from spark_webdataset.format.keys import count_duplicates, first_duplicate_in_blocks, merge_blocks, sort_run
from spark_webdataset.format.names import (
    check_fields,
    first_invalid_key,
    key_error,
    member_name_error,
)
from spark_webdataset.format.sample_reader import iter_samples
from spark_webdataset.format.shard_writer import ShardWriter
from spark_webdataset.format.sizes import format_size, parse_size

# -- names -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "columns, message",
    [
        (["txt"], "no '__key__' column"),
        (["__key__"], "no field columns besides '__key__'"),
        (["__key__", ""], "column '': the field name is empty"),
        (["__key__", "__meta__"], "'__meta__' is a reserved column name"),
        (["__key__", "Label"], "must be lower case .*rename the column to 'label'"),
        (["__key__", "a/b"], "may not hold '/' or NUL"),
        (["__key__", ".png"], "may not start with '.'"),
        (["__key__", "txt", "txt"], "column 'txt' appears twice"),
    ],
)
def test_bad_columns_are_refused_naming_the_column_and_rule(columns: list[str], message: str) -> None:
    with pytest.raises(InvalidField, match=message):
        check_fields(columns)


def test_fields_keep_column_order_and_may_hold_dots() -> None:
    assert check_fields(["cls", "__key__", "seg.png", "txt"]) == ["cls", "seg.png", "txt"]


def test_a_key_that_is_not_a_string_is_named_by_its_type() -> None:
    assert key_error(5) == "the key must be a string, not int"
    assert key_error(b"a") == "the key must be a string, not bytes"


def test_first_invalid_key_points_at_the_row() -> None:
    assert first_invalid_key(["a", "b/c", "d"]) is None
    assert first_invalid_key(["a", "b", "x/../y"]) == (2, "x/../y", "the key has a '..' path segment")


def test_member_names_that_fit_ustar_or_may_use_pax_pass() -> None:
    assert member_name_error("k" * 96 + ".txt", allow_pax=False) is None  # exactly 100 bytes
    assert "101 bytes" in str(member_name_error("k" * 97 + ".txt", allow_pax=False))
    assert member_name_error("ключ." + "k" * 200, allow_pax=True) is None


# -- key runs --------------------------------------------------------------------------------------


def _run(keys: list[str]) -> pa.RecordBatch:
    return pa.record_batch(
        [pa.array(keys, pa.large_string()), pa.array(range(len(keys)), pa.int32())], names=["key", "shard"]
    )


def test_a_key_run_sorts_and_names_a_repeated_key() -> None:
    assert sort_run(_run([]))[0].num_rows == 0
    ordered, ascending = sort_run(_run(["c", "a", "b"]))
    assert ordered.column(0).to_pylist() == ["a", "b", "c"] and not ascending
    assert ordered.column(1).to_pylist() == [1, 2, 0]  # the other columns follow their keys
    with pytest.raises(DuplicateKey, match="duplicate sample key 'b'"):
        sort_run(_run(["c", "b", "d", "b"]))


def test_a_key_run_that_arrived_ascending_is_kept_as_is_and_an_adjacent_repeat_is_still_named() -> None:
    rows = _run(["a", "b", "c"])
    kept, ascending = sort_run(rows)
    assert kept is rows and ascending
    with pytest.raises(DuplicateKey, match="duplicate sample key 'b'"):  # ascending but not strictly
        sort_run(_run(["a", "b", "b", "c"]))


def blocks(*parts: tuple[list[str], list[int]]) -> list[tuple[pa.Array, np.ndarray]]:
    """Merged blocks as `merge_blocks` yields them: keys and the run number of each."""
    return [(pa.array(keys, pa.large_string()), np.array(runs, dtype=np.int64)) for keys, runs in parts]


def test_first_duplicate_is_found_within_and_across_merged_blocks() -> None:
    within = list(first_duplicate_in_blocks(blocks((["a", "b", "b", "c"], [0, 0, 1, 1]), (["d"], [0]))))
    assert [found for _, found in within] == [("b", 0, 1)]  # stops at the block that holds it
    across = list(first_duplicate_in_blocks(blocks((["a", "b"], [0, 2]), (["b", "c"], [1, 1]), (["d"], [0]))))
    assert [found for _, found in across] == [None, ("b", 2, 1)]
    clean = list(first_duplicate_in_blocks(blocks((["a"], [0]), (["b"], [1]))))
    assert [found for _, found in clean] == [None, None]


def test_count_duplicates_counts_every_repeat_and_lists_the_first_few() -> None:
    merged = blocks((["a", "a", "b"], [0, 1, 0]), (["b", "c", "c", "d"], [2, 0, 2, 1]))
    count, listed = count_duplicates(merged, listed=2)
    assert count == 3
    assert listed == [("a", 0, 1), ("b", 0, 2)]


def test_merged_runs_are_sorted_and_say_which_run_each_key_came_from() -> None:
    runs = [
        [pa.array(["a", "c"], pa.large_string()), pa.array(["e"], pa.large_string())],
        [pa.array([], pa.large_string()), pa.array(["b", "c", "f"], pa.large_string())],
    ]
    merged = list(merge_blocks(runs))
    keys = [key for block, _ in merged for key in block.to_pylist()]
    owners = [int(run) for _, owner in merged for run in owner]
    assert keys == ["a", "b", "c", "c", "e", "f"]
    assert owners == [0, 1, 0, 1, 0, 1]
    assert count_duplicates(iter(merged), listed=5) == (1, [("c", 0, 1)])


# -- encode and decode -----------------------------------------------------------------------------

META = pa.struct(
    [
        ("ts", pa.timestamp("us", "UTC")),
        ("naive", pa.timestamp("us")),
        ("day", pa.date32()),
        ("amount", pa.decimal128(10, 2)),
        ("note", pa.string()),
        ("tags", pa.list_(pa.string())),
        ("counts", pa.map_(pa.string(), pa.int64())),
    ]
)
META_VALUE = {
    "ts": datetime.datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=datetime.timezone.utc),
    "naive": datetime.datetime(2026, 1, 2, 3, 4, 5),
    "day": datetime.date(2026, 1, 2),
    "amount": decimal.Decimal("12.34"),
    "note": None,
    "tags": ["a", None],
    "counts": [("k", 1)],
}


def test_structs_of_dates_decimals_and_nulls_survive_json_round_trip() -> None:
    column = pa.array([META_VALUE, None], META)
    encoded = encode_column(column, "meta").to_pylist()
    assert encoded[1] is None  # null: no member
    assert json.loads(encoded[0]) == {
        "ts": "2026-01-02T03:04:05.600000Z",
        "naive": "2026-01-02T03:04:05",
        "day": "2026-01-02",
        "amount": "12.34",
        "note": None,
        "tags": ["a", None],
        "counts": {"k": 1},
    }
    decoded = decode_column(encoded, META, "meta", ["k0", "k1"])
    assert decoded.equals(column)


SCALARS = {
    "binary": pa.array([b"\x00\xff", None, b""], pa.binary()),
    "string": pa.array(["ключ", "", None], pa.string()),
    "int64": pa.array([-(2**62), 0, None], pa.int64()),
    "float64": pa.array([0.1, -1e300, None], pa.float64()),
    "decimal": pa.array([decimal.Decimal("-12.30"), None, decimal.Decimal("0.01")], pa.decimal128(6, 2)),
    "bool": pa.array([True, False, None], pa.bool_()),
    "date": pa.array([datetime.date(1970, 1, 1), datetime.date(2026, 12, 31), None], pa.date32()),
    "timestamp utc": pa.array(
        [
            datetime.datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=datetime.timezone.utc),
            None,
            datetime.datetime(1999, 12, 31),
        ],
        pa.timestamp("us", "UTC"),
    ),
    "timestamp naive": pa.array(
        [datetime.datetime(2026, 1, 2, 3, 4, 5), None, datetime.datetime(2000, 2, 29)], pa.timestamp("us")
    ),
}


@pytest.mark.parametrize("kind", SCALARS)
def test_scalar_columns_survive_encode_then_decode(kind: str) -> None:
    column = SCALARS[kind]
    payloads = encode_column(column, "f").to_pylist()
    assert [p is None for p in payloads] == [v is None for v in column.to_pylist()]  # null: no member
    assert decode_column(payloads, column.type, "f", ["a", "b", "c"]).equals(column)


def test_nested_binary_and_times_become_json_text() -> None:
    kind = pa.struct([("raw", pa.binary()), ("at", pa.time64("us"))])
    [encoded] = encode_column(pa.array([{"raw": b"\x00\xff", "at": datetime.time(1, 2, 3)}], kind), "x").to_pylist()
    document = json.loads(encoded)
    assert base64.b64decode(document["raw"]) == b"\x00\xff"
    assert document["at"] == "01:02:03"


def test_a_null_typed_column_writes_no_members() -> None:
    assert encode_column(pa.nulls(3), "empty").to_pylist() == [None, None, None]


def test_a_type_without_an_encoding_is_refused_naming_the_column() -> None:
    with pytest.raises(InvalidField, match="column 'gap' has type duration"):
        encode_column(pa.array([datetime.timedelta(days=1)], pa.duration("s")), "gap")


def test_decoding_as_a_type_we_cannot_parse_is_a_bad_option() -> None:
    with pytest.raises(BadOption, match="cannot decode webdataset fields as duration"):
        parser_for(pa.duration("s"))


@pytest.mark.parametrize(
    "good, bad, arrow_type, message",
    [
        (b"1", b"yes", pa.bool_(), "sample 'k1', field 'f': cannot decode b'yes' as bool"),
        (b"1", b"300", pa.int8(), "sample 'k1', field 'f': b'300' does not fit int8"),
        (
            b"2026-12-01",
            b"2026-13-01",
            pa.date32(),
            r"sample 'k1', field 'f': cannot decode b'2026-13-01' as date32",
        ),
        (b'{"a": 1}', b'{"a": ', pa.struct([("a", pa.int64())]), "sample 'k1', field 'f': cannot decode"),
    ],
)
def test_payloads_that_do_not_parse_name_the_sample_and_field(
    good: bytes, bad: bytes, arrow_type, message: str
) -> None:
    assert decode_column([good], arrow_type, "f", ["k0"]).null_count == 0
    with pytest.raises(InputError, match=message):
        decode_column([good, bad], arrow_type, "f", ["k0", "k1"])


def test_booleans_read_the_spellings_other_tools_write() -> None:
    values = [b"1", b"0", b"true", b"FALSE\n", None]
    assert decode_column(values, pa.bool_(), "flag", list("abcde")).to_pylist() == [
        True,
        False,
        True,
        False,
        None,
    ]


# -- sizes and headers -----------------------------------------------------------------------------


def test_sizes_parse_as_people_write_them() -> None:
    assert parse_size("3GiB") == 3 << 30
    assert parse_size(" 1.5 MB ") == 1_500_000
    assert parse_size("512k") == 512 * 1024
    assert parse_size(4096) == 4096


@pytest.mark.parametrize(
    "text, message",
    [("0", "must be positive"), (-5, "must be positive"), ("3 parsecs", "is not a byte size")],
)
def test_bad_sizes_name_the_option(text, message: str) -> None:
    with pytest.raises(ValueError, match=f"^maxShardBytes={text!r} {message}"):
        parse_size(text, "maxShardBytes")


def test_sizes_format_in_binary_units_up_to_tib() -> None:
    assert [format_size(n) for n in (0, 1023, 1536, 3 << 30, 5 << 40, 1 << 50)] == [
        "0 B",
        "1023 B",
        "1.5 KiB",
        "3.0 GiB",
        "5.0 TiB",
        "1024.0 TiB",
    ]


def test_member_bytes_count_the_header_and_padding() -> None:
    assert [ustar.member_bytes(n) for n in (0, 1, 512, 513)] == [512, 1024, 1024, 1536]


def test_headers_refuse_what_ustar_cannot_hold() -> None:
    with pytest.raises(ValueError, match="option mtime=-1 does not fit"):
        ustar.header_template(-1)
    with pytest.raises(ValueError, match="mtime=8589934592"):
        ustar.header_template(8**11)
    template = ustar.header_template(0)
    with pytest.raises(ValueError, match="member name of 101 bytes"):
        ustar.build_header(template, b"n" * 101, 1)
    with pytest.raises(ValueError, match="a member of 8589934592 bytes"):
        ustar.build_header(template, b"a.bin", 8**11)
    largest = ustar.build_header(template, b"a.bin", ustar.MAX_USTAR_SIZE)
    assert tarfile.TarInfo.frombuf(largest, "utf-8", "strict").size == ustar.MAX_USTAR_SIZE


# -- the shard writer's options and rarer rows ------------------------------------------------------


def open_in(tmp_path: Path, opened: list):
    def open_shard(sequence: int):
        stream = open(tmp_path / f"shard-{sequence:06d}.tar", "wb")
        opened.append(stream)
        return stream

    return open_shard


def test_writer_fields_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    opened: list = []
    with pytest.raises(InvalidField, match="column 'ключ': field name 'ключ' is not ASCII .*allowPax=true"):
        ShardWriter(["ключ"], open_in(tmp_path, opened), 1 << 20)
    assert opened == [] and list(tmp_path.iterdir()) == []


def test_null_values_leave_members_out_on_the_pax_and_direct_paths(tmp_path: Path) -> None:
    long_key = "k" * 120
    big = b"B" * 100_000  # over the direct-write threshold: members go straight from the buffers
    opened: list = []
    writer = ShardWriter(["txt", "bin"], open_in(tmp_path, opened), 1 << 30, allow_pax=True)
    writer.write_batch(
        pa.array([long_key, "short"]),
        [encode_column(pa.array([None, "t"]), "txt"), encode_column(pa.array([b"x", None]), "bin")],
    )
    writer.write_batch(
        pa.array(["d0", "d1"]),
        [encode_column(pa.array(["a", None]), "txt"), encode_column(pa.array([None, big]), "bin")],
    )
    writer.close()
    with open(tmp_path / "shard-000000.tar", "rb") as stream:
        got = [(s.key, s.fields) for s in iter_samples(stream)]
    assert got == [
        (long_key, {"bin": b"x"}),
        ("short", {"txt": b"t"}),
        ("d0", {"txt": b"a"}),
        ("d1", {"bin": big}),
    ]


def test_discard_closes_every_shard_without_finishing_it(tmp_path: Path) -> None:
    opened: list = []
    writer = ShardWriter(["txt"], open_in(tmp_path, opened), 4096)
    writer.write_batch(pa.array([f"{i}" for i in range(10)]), [encode_column(pa.array(["x" * 600] * 10), "txt")])
    writer.discard()
    assert len(opened) > 1 and all(stream.closed for stream in opened)
    last = (tmp_path / f"shard-{len(opened) - 1:06d}.tar").read_bytes()
    assert not last.endswith(ustar.END_OF_ARCHIVE)  # the open shard was not finished
    with pytest.raises(TarFormatError, match="end-of-archive"):
        list(iter_samples(io.BytesIO(last)))


# -- errors ----------------------------------------------------------------------------------------


def test_tar_errors_cross_process_boundaries_with_shard_offset_and_key() -> None:
    error = TarFormatError("field 'txt' appears twice in one sample", 1536, "k/1").in_shard("shard-000003.tar")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is TarFormatError
    assert (copy.shard, copy.offset, copy.key) == ("shard-000003.tar", 1536, "k/1")
    assert str(copy) == "shard-000003.tar: offset 1536 (key 'k/1'): field 'txt' appears twice in one sample"


def test_from_spark_returns_our_own_errors_as_they_are() -> None:
    error = InvalidKey("invalid sample key 'a.b'")
    assert from_spark(error) is error
    assert isinstance(from_spark(RuntimeError("spark_webdataset.errors.DuplicateKey: twice")), WebDatasetError)


NESTED_BINARY = pa.struct(
    [
        ("raw", pa.binary()),
        ("big", pa.large_binary()),
        ("parts", pa.list_(pa.binary())),
        ("by_name", pa.map_(pa.string(), pa.binary())),
        ("by_bytes", pa.map_(pa.binary(), pa.binary())),
    ]
)
NESTED_BINARY_VALUE = {
    "raw": b"\x00\x01",
    "big": b"\xff" * 5,
    "parts": [b"", None, b"\x80abc"],
    "by_name": [("a", b"\x00"), ("b", None)],
    "by_bytes": [(b"\x00\xfe", b"\x01")],
}


@pytest.mark.parametrize(
    "column",
    [
        pa.array([NESTED_BINARY_VALUE, None, dict.fromkeys(NESTED_BINARY.names)], NESTED_BINARY),
        pa.array([[b"\x00\x01", None], None, []], pa.list_(pa.binary())),
        pa.array([[("k", b"\x00\x01")], None, [("e", b"")]], pa.map_(pa.string(), pa.binary())),
    ],
    ids=["struct", "array", "map"],
)
def test_binary_inside_nested_types_survives_encode_then_decode(column: pa.Array) -> None:
    payloads = encode_column(column, "f").to_pylist()
    assert decode_column(payloads, column.type, "f", ["a", "b", "c"]).equals(column)


def test_nested_binary_that_is_not_base64_names_the_sample_and_field() -> None:
    kind = pa.struct([("raw", pa.binary())])
    assert decode_column([b'{"raw":"AAE="}'], kind, "f", ["k0"]).to_pylist() == [{"raw": b"\x00\x01"}]
    for bad in (b'{"raw":"AA!="}', b'{"raw":7}'):
        with pytest.raises(InputError, match="sample 'k1', field 'f': cannot decode"):
            decode_column([b'{"raw":"AAE="}', bad], kind, "f", ["k0", "k1"])


GAP = datetime.timedelta(seconds=3)


@pytest.mark.parametrize(
    "kind, value, path",
    [
        (pa.struct([("n", pa.string()), ("gap", pa.duration("us"))]), {"n": "n", "gap": GAP}, "'x.gap'"),
        (pa.list_(pa.struct([("gap", pa.duration("s"))])), [{"gap": GAP}], r"'x\[\].gap'"),
        (pa.map_(pa.string(), pa.duration("ms")), [("k", GAP)], r"'x\{value\}'"),
    ],
)
def test_a_nested_value_without_a_json_form_is_refused_naming_the_column(kind, value, path: str) -> None:
    rule = rf"column 'x' holds {path} of type duration\[\w+\], which has no JSON form"
    with pytest.raises(InvalidField, match=rule):
        encode_column(pa.array([None, value], kind), "x")
    with pytest.raises(InvalidField, match=rule):  # by its type: even when every value is null
        encode_column(pa.nulls(2, kind), "x")


def test_a_value_the_type_check_let_through_is_still_refused_naming_column_and_row(monkeypatch) -> None:
    from spark_webdataset.format import encode

    monkeypatch.setattr(encode, "_check_json_form", lambda *args: None)  # as if a new leaf type slipped by
    kind = pa.struct([("gap", pa.duration("s"))])
    column = pa.array([{"gap": None}, None, {"gap": datetime.timedelta(seconds=1)}], kind)
    with pytest.raises(InvalidField, match="column 'x', row 2 of the batch: cannot encode timedelta as JSON"):
        encode_column(column, "x")
