"""Hostile tars (issue 19): clear, typed errors in bounded memory, and one verdict for the same bytes.

Every tar here is written by hand, header by header (tests/support/tars.py). Each is read back
through the real exact parser (`iter_samples`), the reader's fast path
(`read_sample_batches`, over a seekable stream and over a pipe), the
validator (`check_shard`: its fast scan, then the exact parser) and,
where it matters, `validate_version`, the CLI and the view: they must fail with the same error
type, message and header offset. Spark's reader on them: tests/integration/test_hostile_tars.py.
"""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import pytest

from spark_webdataset.errors import MemberSizeError
from spark_webdataset.format import tar_rules, ustar
from spark_webdataset.format.fast_read import read_sample_batches
from spark_webdataset.format.fast_verify import scan_shard
from spark_webdataset.format.manifest import Manifest
from spark_webdataset.format.sample_reader import iter_members, iter_samples
from spark_webdataset.format.verify import check_shard
from tests.support.python_memory import PythonPeak
from tests.support.tars import (
    BLOCK,
    END,
    GOOD,
    HUGE,
    Pipe,
    bogus_pax_length,
    claiming,
    huge_base256,
    member,
    one_verdict,
    pax,
    pax_record,
    pax_size_past_the_end,
    version_with,
    with_field,
)

# -- the malformed inputs ----------------------------------------------------------------------


def test_a_base256_size_of_2_62_is_a_typed_error_at_its_header_everywhere() -> None:
    kind, message, offset = one_verdict(huge_base256())
    assert (kind, offset) == ("MemberSizeError", 1024)
    assert f"its size, {HUGE} bytes (base-256), runs past the end of the shard" in message


def test_a_bogus_pax_record_length_fails_reader_and_validator_with_the_same_rule() -> None:
    kind, message, offset = one_verdict(bogus_pax_length())
    assert (kind, offset) == ("BadPaxRecord", 1024)
    assert "a PAX record's length 99999999999 runs past its extended header" in message


def test_a_pax_size_larger_than_the_shard_is_an_error_at_the_members_header() -> None:
    data = pax_size_past_the_end()
    kind, message, offset = one_verdict(data)
    assert (kind, offset) == ("MemberSizeError", 2048)
    assert "member 'b.txt' is truncated" in message and "1000000 bytes (from a PAX record)" in message


def test_a_pax_size_is_the_members_size_as_tarfile_reads_it() -> None:
    """The PAX `size` record overrides the header's size field (POSIX; tarfile does the same)."""
    import tarfile

    payload = b"p" * 600
    body = with_field(member("b.txt", b""), 124, b"%011o\0" % 0) + payload + bytes(ustar.padding(600))
    data = GOOD + pax(pax_record("size", "600")) + body + END
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert [(m.name, m.size) for m in tar.getmembers()] == [("a.txt", 5), ("b.txt", 600)]
    assert [(s.key, s.fields) for s in iter_samples(io.BytesIO(data))] == [
        ("a", {"txt": b"first"}),
        ("b", {"txt": payload}),
    ]
    [batch] = list(read_sample_batches(io.BytesIO(data), ["txt"]))
    assert batch.columns["txt"].to_pylist() == [b"first", payload]


@pytest.mark.parametrize(
    "records, rule",
    [
        (b"20 path=b.txt\n", "runs past its extended header"),
        (b"13 path=b.txt\n", "does not end the record at its newline"),  # one short: lands on the 't'
        (b"3 path=b.txt\n", "does not end the record at its newline"),  # shorter than its own length field
        (b"14 path=b.txt\n\n", "a PAX record has no length"),  # a valid record, then a stray byte
        (b"9 pathbt\n", "not of the shape"),  # no "="
        (b"1" * 30 + b" path=x\n", "runs past its extended header"),  # int() never sees 30 digits
        (pax_record("size", "-5"), "the PAX size '-5' is not a decimal number"),
        (pax_record("size", "١٢"), "is not a decimal number"),  # Arabic-Indic digits: str.isdigit says yes
    ],
)
def test_pax_records_that_do_not_parse_are_bad_pax_records(records: bytes, rule: str) -> None:
    data = GOOD + pax(records) + member("b.txt", b"2") + END
    kind, message, offset = one_verdict(data)
    assert (kind, offset) == ("BadPaxRecord", 1024) and rule in message


@pytest.mark.parametrize(
    "size_field, rule",
    [
        (b"-0000001000\0", "not an octal number"),  # int(..., 8) would take the sign: a negative size
        (b"0o000001000\0", "not an octal number"),
        (b"00_00001000\0", "not an octal number"),
        (b"\xff" * 12, "negative base-256 number"),
        (b"\x81" + bytes(11), "neither octal nor base-256"),
    ],
)
def test_size_fields_that_are_not_sizes(size_field: bytes, rule: str) -> None:
    data = GOOD + claiming("b.txt", b"2", size_field) + END
    kind, message, offset = one_verdict(data)
    assert (kind, offset) == ("TarFormatError", 1024) and rule in message


def test_an_extended_header_is_held_to_its_own_bound() -> None:
    records = b"x" * (tar_rules.MAX_EXTENDED_HEADER_BYTES + 1)
    data = GOOD + pax(records) + member("b.txt", b"2") + END
    kind, message, offset = one_verdict(data)
    assert (kind, offset) == ("MemberSizeError", 1024) and "more than the 1048576 one may hold" in message


def test_a_member_over_the_maximum_member_size_is_refused_by_all_three(monkeypatch) -> None:
    data = GOOD + member("b.txt", b"y" * 3000) + END
    kind, message, offset = one_verdict(data, max_member=2048)
    assert (kind, offset) == ("MemberSizeError", 1024)
    assert f"claims 3000 bytes, more than the maximum member size 2048 ({tar_rules.MAX_MEMBER_ENV})" in message
    assert scan_shard(io.BytesIO(data)) is not None  # the default maximum lets it through
    monkeypatch.setenv(tar_rules.MAX_MEMBER_ENV, "2KiB")
    assert tar_rules.max_member_bytes() == 2048
    assert one_verdict(data) == (kind, message, offset)


def test_a_size_past_the_end_costs_no_allocation_of_its_size() -> None:
    """A shard of 3 KiB whose second member claims 256 MiB (octal, so the fast paths follow it):
    nothing parses it by allocating what it claims, seekable or not, end known or not."""
    claimed = 256 << 20
    data = GOOD + claiming("b.txt", b"2", b"%011o\0" % claimed) + END
    readers = {
        "exact": lambda: list(iter_samples(io.BytesIO(data))),
        "exact, pipe, end unknown": lambda: list(iter_samples(io.BufferedReader(Pipe(data)))),
        "fast": lambda: list(read_sample_batches(io.BytesIO(data), ["txt"])),
        "fast, pipe, end unknown": lambda: list(read_sample_batches(io.BufferedReader(Pipe(data)), ["txt"])),
        # chunks smaller than the shard: the chain reaches the claim before the stream's end
        "fast, small chunks": lambda: list(read_sample_batches(io.BytesIO(data), ["txt"], 4 * BLOCK)),
        "fast, small chunks, pipe": lambda: list(
            read_sample_batches(io.BufferedReader(Pipe(data)), ["txt"], 4 * BLOCK, shard_bytes=len(data))
        ),
        "fast, small chunks, pipe, end unknown": lambda: list(
            read_sample_batches(io.BufferedReader(Pipe(data)), ["txt"], 4 * BLOCK)
        ),
        "validator": lambda: check_shard("s.tar", lambda: io.BytesIO(data), None),
    }
    for name, read in readers.items():
        with PythonPeak() as measured:
            if name == "validator":
                report = read()
                assert "runs past the end of the shard" in report.errors[0]["error"]
            else:
                with pytest.raises(MemberSizeError, match=r"member 'b.txt' is truncated"):
                    read()
        assert measured.peak < 32 << 20, (name, measured.peak)


def test_members_iterate_with_the_same_bounds() -> None:
    """`iter_members` (the view's parser) applies the rules too: the base-256 shard fails at its header."""
    with pytest.raises(MemberSizeError) as error:
        list(iter_members(io.BytesIO(huge_base256()), read_data=False))
    assert error.value.offset == 1024


# -- validation: a report whatever it meets; the CLI: one line, no traceback ---------------------


@pytest.mark.parametrize("shard", [huge_base256, bogus_pax_length, pax_size_past_the_end])
def test_validation_writes_its_report_naming_shard_and_offset(tmp_path: Path, shard) -> None:
    from spark_webdataset.dataset.validate import validate_version

    data = shard()
    directory = version_with(tmp_path / "v", data)
    report = validate_version(str(directory), workers=1)
    assert not report.ok
    written = json.loads((directory / "_validation.json").read_text())
    assert written["ok"] is False
    _, message, offset = one_verdict(data)
    assert written["errors"][0] == {"shard": "shard-000000.tar", "offset": offset, "key": None, "error": message}


def test_validation_records_a_shard_it_cannot_check_at_all(tmp_path: Path, monkeypatch) -> None:
    """A failure that is not a broken tar (here: storage refusing the read) is still a recorded error."""
    from spark_webdataset.dataset import validate
    from spark_webdataset.errors import StorageError

    directory = version_with(tmp_path / "v", member("a.txt", b"1") + member("b.txt", b"2") + END)

    def refuse(*args, **kwargs):
        raise StorageError("shard-000000.tar: the bucket said no")

    monkeypatch.setattr(validate, "check_shard", refuse)
    report = validate.validate_version(str(directory), workers=1)
    written = json.loads((directory / "_validation.json").read_text())
    assert not report.ok and written["ok"] is False
    [error] = written["errors"]
    assert (
        error["shard"] == "shard-000000.tar" and "StorageError: shard-000000.tar: the bucket said no" in error["error"]
    )


def test_the_cli_exits_non_zero_on_a_hostile_shard_without_a_traceback(tmp_path: Path, capsys) -> None:
    from spark_webdataset.cli import main

    directory = version_with(tmp_path / "v", huge_base256())
    code = main(["validate", str(directory), "--workers", "1", "--quiet"])
    out, err = capsys.readouterr()
    assert code != 0
    assert "Traceback" not in out + err and "MemoryError" not in out + err
    assert "FAILED" in out and "shard shard-000000.tar, offset 1024" in out
    assert (directory / "_validation.json").exists()


# -- the view: keys our rules refuse are marked, never ordinary samples -----------------------------


@pytest.fixture
def hostile_view(tmp_path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from spark_webdataset.airflow.ui.app import create_app
    from tests.support.webdataset_ui_data import commit_table, digits_table, write_digits_config

    root = tmp_path / "data" / "foreign"
    directory = commit_table(root, "20261205T000000Z", digits_table().slice(0, 3))
    # the committed shard replaced by one another tool wrote: two keys our rules refuse
    data = member("ok.cls", b"1") + member("../evil.cls", b"2") + member("/abs/path.cls", b"3") + END
    (directory / "shard-000000.tar").write_bytes(data)
    manifest = Manifest.from_json((directory / "_manifest.json").read_bytes())
    manifest.sample_index = manifest.sample_index_bytes = None  # the other tool kept no sample index
    (directory / "_manifest.json").write_bytes(manifest.to_json())
    configs = tmp_path / "datasets"
    write_digits_config(configs, "foreign", root)
    app = create_app(configs)
    app.dependency_overrides[app.state.user_dependency] = lambda: "tester"
    return TestClient(app)


def test_the_view_marks_keys_that_break_the_key_rules(hostile_view) -> None:
    body = hostile_view.get("/api/datasets/foreign/versions/20261205T000000Z/preview?n=8").json()
    problems = {s["key"]: s["key_problem"] for s in body["samples"]}
    assert problems["ok"] is None
    assert "starts with '.'" in problems["../evil"]
    assert "starts with '/'" in problems["/abs/path"]
    warned = {e["key"]: e for e in body["errors"]}
    assert set(warned) == {"../evil", "/abs/path"}
    assert warned["../evil"]["offset"] == 1024 and "breaks a key rule" in warned["../evil"]["error"]
    page = hostile_view.get("/datasets/foreign/versions/20261205T000000Z?n=8")
    assert page.status_code == 200
    assert page.text.count("breaks a key rule") == 2  # shown as warnings, escaped
    assert "key &#39;../evil&#39; breaks a key rule" in page.text
    assert "'../evil'" not in page.text


def test_the_random_preview_marks_them_too(hostile_view) -> None:
    body = hostile_view.get("/api/datasets/foreign/versions/20261205T000000Z/preview?n=8&mode=random&seed=3").json()
    for sample in body["samples"]:
        assert (sample["key_problem"] is None) == (sample["key"] == "ok")
    assert {e["key"] for e in body["errors"]} == {s["key"] for s in body["samples"] if s["key"] != "ok"}


def test_key_range_problems_are_named() -> None:
    from spark_webdataset.airflow.ui.summary import key_range_problem

    assert key_range_problem("a", "b") is None
    assert "first key '../evil'" in str(key_range_problem("../evil", "z"))
    assert "last key '/abs'" in str(key_range_problem("a", "/abs"))
