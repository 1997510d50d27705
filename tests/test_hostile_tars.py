"""Hostile tars (issue 19): clear, typed errors in bounded memory, and one verdict for the same bytes.

Every tar here is written by hand, header by header. Each is read back
through the real exact parser (`iter_samples`), the reader's fast path
(`read_sample_batches`, over a seekable stream and over a pipe), the
validator (`check_shard`: its fast scan, then the exact parser) and,
where it matters, Spark's reader, `validate_version` and the CLI: they
must fail with the same error type, message and header offset.
"""

from __future__ import annotations

import io
import json
import tracemalloc
import warnings
from pathlib import Path

import pytest

from spark_webdataset.errors import BadPaxRecord, MemberSizeError, TarFormatError, from_spark
from spark_webdataset.format import tar_rules, ustar
from spark_webdataset.format.fast_scan import read_sample_batches
from spark_webdataset.format.manifest import Manifest, ShardEntry
from spark_webdataset.format.sample_reader import iter_members, iter_samples
from spark_webdataset.format.scan import scan_shard
from spark_webdataset.format.verify import check_shard

END = ustar.END_OF_ARCHIVE
BLOCK = ustar.BLOCK
HUGE = 2**62


def member(name: str, data: bytes, typeflag: bytes = b"0") -> bytes:
    """One USTAR member (header, payload, padding) as our writer lays it out."""
    header = ustar.build_header(ustar.header_template(0, typeflag), name.encode(), len(data))
    return header + data + bytes(ustar.padding(len(data)))


def with_field(header: bytes, start: int, raw: bytes) -> bytes:
    """A header block with bytes at `start` replaced and its checksum made right again."""
    block = bytearray(header[:BLOCK])
    block[start : start + len(raw)] = raw
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def claiming(name: str, data: bytes, size_field: bytes) -> bytes:
    """A member whose header's size field says `size_field` (12 bytes) whatever `data` holds."""
    assert len(size_field) == 12
    return with_field(member(name, data), 124, size_field) + data + bytes(ustar.padding(len(data)))


def base256(size: int) -> bytes:
    return b"\x80" + size.to_bytes(11, "big")


def pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length = len(str(length)) + len(body)
    return str(length).encode() + body


def pax(records: bytes) -> bytes:
    return member("././@PaxHeader", records, typeflag=b"x")


class Pipe(io.RawIOBase):
    """The bytes of a shard as a stream that cannot seek (a pipe, a socket)."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:  # type: ignore[override]
        count = min(len(target), len(self.data))
        target[:count] = self.data[:count]
        self.data = self.data[count:]
        return count


def failure(call) -> tuple[str, str, int]:
    """(type, message, offset) of the TarFormatError `call` raises."""
    with pytest.raises(TarFormatError) as error:
        call()
    return type(error.value).__name__, error.value.message, error.value.offset


def verdicts(data: bytes, max_member: int | None = None) -> dict[str, tuple]:
    """What every parser of ours says about `data` (each must fail)."""
    fields = ["txt"]
    said = {
        "exact": failure(lambda: list(iter_samples(io.BytesIO(data), max_member=max_member))),
        "exact, fields only": failure(lambda: list(iter_samples(io.BytesIO(data), {"txt"}, max_member=max_member))),
        "exact, pipe": failure(
            lambda: list(iter_samples(io.BufferedReader(Pipe(data)), shard_bytes=len(data), max_member=max_member))
        ),
    }
    for chunk in (BLOCK * 4, 1 << 20):
        said[f"fast {chunk}"] = failure(
            lambda: list(read_sample_batches(io.BytesIO(data), fields, chunk, max_member=max_member))
        )
        said[f"fast {chunk}, pipe"] = failure(
            lambda: list(
                read_sample_batches(
                    io.BufferedReader(Pipe(data)), fields, chunk, shard_bytes=len(data), max_member=max_member
                )
            )
        )
    said["fast, keys only"] = failure(lambda: list(read_sample_batches(io.BytesIO(data), [], max_member=max_member)))
    assert scan_shard(io.BytesIO(data), max_member=max_member) is None
    report = check_shard("shard-000000.tar", lambda: io.BytesIO(data), None, (), len(data), max_member)
    first = report.errors[0]
    assert first["shard"] == "shard-000000.tar"
    said["validator"] = (None, first["error"], first["offset"])
    return said


def one_verdict(data: bytes, max_member: int | None = None) -> tuple[str, str, int]:
    said = verdicts(data, max_member)
    validator = said.pop("validator")
    distinct = set(said.values())
    assert len(distinct) == 1, said
    [(kind, message, offset)] = distinct
    assert validator == (None, message, offset)
    return kind, message, offset


# -- the malformed inputs ----------------------------------------------------------------------

GOOD = member("a.txt", b"first")  # a sample before the bad header: the error is not at offset 0


def huge_base256() -> bytes:
    """A USTAR size field in base-256 claiming 2**62 bytes (the adversarial test's shard)."""
    return GOOD + claiming("b.txt", b"2", base256(HUGE)) + END


def bogus_pax_length() -> bytes:
    """A PAX record whose length (99999999999) runs far past its extended header."""
    return GOOD + pax(b"99999999999 path=b.txt\n") + member("b.txt", b"2") + END


def pax_size_past_the_end() -> bytes:
    """A PAX `size` record larger than the whole shard (the USTAR size field says 1 byte)."""
    return GOOD + pax(pax_record("path", "b.txt") + pax_record("size", "1000000")) + member("b.txt", b"2") + END


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
        tracemalloc.start()
        try:
            if name == "validator":
                report = read()
                assert "runs past the end of the shard" in report.errors[0]["error"]
            else:
                with pytest.raises(MemberSizeError, match=r"member 'b.txt' is truncated"):
                    read()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 32 << 20, (name, peak)


def test_members_iterate_with_the_same_bounds() -> None:
    """`iter_members` (the view's parser) applies the rules too: the base-256 shard fails at its header."""
    with pytest.raises(MemberSizeError) as error:
        list(iter_members(io.BytesIO(huge_base256()), read_data=False))
    assert error.value.offset == 1024


# -- validation: a report whatever it meets; the CLI: one line, no traceback ---------------------


def version_with(directory: Path, data: bytes, samples: int = 2, first: str = "a", last: str = "b") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "shard-000000.tar").write_bytes(data)
    entry = ShardEntry("shard-000000.tar", samples, len(data), first, last)
    fields = [{"name": "txt", "type": "binary", "nullable": False}]
    (directory / "_manifest.json").write_bytes(Manifest([entry], fields, {}).to_json())
    return directory


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
    assert error["shard"] == "shard-000000.tar" and "StorageError: shard-000000.tar: the bucket said no" in error["error"]


def test_the_cli_exits_non_zero_on_a_hostile_shard_without_a_traceback(tmp_path: Path, capsys) -> None:
    from spark_webdataset.cli import main

    directory = version_with(tmp_path / "v", huge_base256())
    code = main(["validate", str(directory), "--workers", "1", "--quiet"])
    out, err = capsys.readouterr()
    assert code != 0
    assert "Traceback" not in out + err and "MemoryError" not in out + err
    assert "FAILED" in out and "shard shard-000000.tar, offset 1024" in out
    assert (directory / "_validation.json").exists()


# -- Spark's reader: the shard and the offset in the failure ---------------------------------------


def spark_failure(call) -> tuple[Exception, TarFormatError]:
    with pytest.raises(Exception) as failure_info:
        call()
    typed = from_spark(failure_info.value)
    assert isinstance(typed, TarFormatError), failure_info.value
    return failure_info.value, typed


def test_spark_reader_names_shard_and_offset_of_a_base256_size(spark, tmp_path: Path) -> None:
    directory = version_with(tmp_path / "v", huge_base256())
    raw, typed = spark_failure(lambda: spark.read.format("webdataset").load(str(directory)).collect())
    assert isinstance(typed, MemberSizeError)
    text = str(raw)
    assert "MemoryError" not in text
    assert "shard-000000.tar: offset 1024: member 'b.txt' is truncated" in text
    assert f"its size, {HUGE} bytes (base-256), runs past the end of the shard" in text


def test_spark_reader_and_validator_fail_a_bogus_pax_length_with_the_same_rule(spark, tmp_path: Path) -> None:
    from spark_webdataset.dataset.validate import validate_version

    data = bogus_pax_length()
    directory = version_with(tmp_path / "v", data)
    raw, typed = spark_failure(lambda: spark.read.format("webdataset").load(str(directory)).collect())
    assert isinstance(typed, BadPaxRecord)
    [error] = validate_version(str(directory), workers=1).errors
    assert error["offset"] == 1024
    assert f"shard-000000.tar: offset {error['offset']}: {error['error']}" in str(raw)


def test_spark_reader_fails_a_pax_size_past_the_end(spark, tmp_path: Path) -> None:
    directory = version_with(tmp_path / "v", pax_size_past_the_end())
    raw, typed = spark_failure(lambda: spark.read.format("webdataset").load(str(directory)).collect())
    assert isinstance(typed, MemberSizeError) and "shard-000000.tar: offset 2048" in str(raw)


def test_spark_reader_skips_and_counts_a_hostile_shard_when_asked(spark, tmp_path: Path) -> None:
    shards = tmp_path / "foreign"
    shards.mkdir()
    (shards / "shard-000000.tar").write_bytes(member("k1.txt", b"1") + member("k2.txt", b"2") + END)
    (shards / "shard-000001.tar").write_bytes(huge_base256())
    counted = tmp_path / "bad"
    frame = (
        spark.read.format("webdataset")
        .schema("__key__ string, txt binary")
        .option("skipBadShards", "true")
        .option("badShardsDir", str(counted))
        .load(str(shards))
    )
    assert sorted(r["__key__"] for r in frame.collect()) == ["k1", "k2"]
    [record] = [json.loads(p.read_text()) for p in counted.glob("*.json")]
    assert record["shard"].endswith("shard-000001.tar") and "offset 1024" in record["error"]


# -- the view: keys our rules refuse are marked, never ordinary samples -----------------------------


@pytest.fixture
def hostile_view(tmp_path: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from spark_webdataset.airflow.ui.app import create_app
    from webdataset_ui_data import commit_table, digits_table, write_config

    root = tmp_path / "data" / "foreign"
    directory = commit_table(root, "20261205T000000Z", digits_table().slice(0, 3))
    # the committed shard replaced by one another tool wrote: two keys our rules refuse
    data = member("ok.cls", b"1") + member("../evil.cls", b"2") + member("/abs/path.cls", b"3") + END
    (directory / "shard-000000.tar").write_bytes(data)
    configs = tmp_path / "datasets"
    write_config(configs, "foreign", root)
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
