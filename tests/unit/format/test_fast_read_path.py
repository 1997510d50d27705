"""The reader's fast path (format/fast_read.py) against the exact parser, its judge.

On every tar here both readers must give the same rows (key, then each
asked-for field's payload or None) and, where the tar is damaged or
breaks a WebDataset rule, the same TarFormatError (message, offset, key)
after the same rows. Chunks as small as a few blocks put every header,
payload and end-of-archive block across a chunk boundary somewhere.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pytest

from spark_webdataset.errors import TarFormatError
from spark_webdataset.format import ustar
from spark_webdataset.format.encode import encode_column
from spark_webdataset.format.fast_read import read_sample_batches
from spark_webdataset.format.sample_reader import iter_samples
from spark_webdataset.format.shard_writer import ShardWriter
from tests.support.helpers import tar_by_tarfile
from tests.support.tars import END, Pipe, member

CHUNKS = [1024, 4096, 3 * 4096, 1 << 20]
Outcome = tuple[list[tuple], tuple[str, int, str | None] | None]


def base256(name: str, data: bytes) -> bytes:
    """A member whose size is spelled in GNU base-256, checksum made right again."""
    block = bytearray(member(name, data))
    block[124:136] = b"\x80" + len(data).to_bytes(11, "big")
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block[: ustar.BLOCK])
    return bytes(block)


def fast(stream: BinaryIO, fields: list[str], chunk: int) -> Outcome:
    rows: list[tuple] = []
    try:
        for batch in read_sample_batches(stream, fields, chunk):
            assert batch.keys.type == pa.string()
            assert all(batch.columns[f].type == pa.binary() for f in fields)
            columns = [batch.columns[f].to_pylist() for f in fields]
            rows += zip(batch.keys.to_pylist(), *columns)
    except TarFormatError as error:
        return rows, (error.message, error.offset, error.key)
    return rows, None


def exact(data: bytes, fields: list[str]) -> Outcome:
    rows: list[tuple] = []
    try:
        for sample in iter_samples(io.BytesIO(data), set(fields)):
            rows.append((sample.key, *[sample.fields.get(f) for f in fields]))
    except TarFormatError as error:
        return rows, (error.message, error.offset, error.key)
    return rows, None


def agree(data: bytes, fields: list[str], chunks: list[int] = CHUNKS) -> Outcome:
    """Both readers, every chunk size, seekable and not: the same outcome; returns it."""
    judge = exact(data, fields)
    for chunk in chunks:
        for stream in (io.BytesIO(data), io.BufferedReader(Pipe(data))):
            assert fast(stream, fields, chunk) == judge, (chunk, type(stream).__name__)
    return judge


def ours(rows: list[tuple[str, dict[str, bytes]]], fields: list[str], tmp_path: Path) -> bytes:
    """A shard our writer writes (None: the member is left out)."""
    path = tmp_path / "ours.tar"
    writer = ShardWriter(fields, lambda _: open(path, "wb"), max_shard_bytes=1 << 40)
    keys = pa.array([key for key, _ in rows])
    columns = [encode_column(pa.array([values.get(f) for _, values in rows], pa.binary()), f) for f in fields]
    writer.write_batch(keys, columns)
    writer.close()
    return path.read_bytes()


# -- valid tars: the same rows ----------------------------------------------------------------


def test_our_shards_tiny_large_empty_and_missing_members(tmp_path: Path) -> None:
    sizes = [0, 1, 511, 512, 513, 1000, 4095, 4096, 4097, 70_000, 0, 3]
    rows = [
        (f"k{i:03d}", {"bin": os.urandom(size), "cls": b"%d" % i} if i % 4 else {"bin": os.urandom(size)})
        for i, size in enumerate(sizes * 3)
    ]
    data = ours(rows, ["bin", "cls"], tmp_path)
    for fields in (["bin", "cls"], ["cls"], ["bin"], [], ["cls", "absent"]):
        found, error = agree(data, fields)
        assert error is None and len(found) == len(rows)
    found, _ = agree(data, ["cls", "bin"])
    assert found[1] == ("k001", b"1", rows[1][1]["bin"]) and found[0][1] is None


def test_many_fields_and_fields_the_schema_skips(tmp_path: Path) -> None:
    fields = ["jpg", "json", "cls", "seg.png", "txt", "a" * 20]
    rows = [(f"s{i:05d}", {f: os.urandom(i % 50) for f in fields if (i + len(f)) % 3}) for i in range(600)]
    data = ours(rows, fields, tmp_path)
    found, error = agree(data, ["seg.png", "a" * 20, "cls"], [4096, 1 << 20])
    assert error is None and found[1] == ("s00001", *[rows[1][1].get(f) for f in ("seg.png", "a" * 20, "cls")])


def test_dots_and_slashes_in_keys() -> None:
    names = ["a.b/c.d.e", "a.b/c.x", "dir/sub/k1.seg.png", "dir/sub/k1.txt", "x.y.z/w.", "q.txt"]
    data = b"".join(member(name, name.encode()) for name in names) + END
    found, error = agree(data, ["d.e", "x", "seg.png", "txt", ""])
    assert error is None
    assert [row[0] for row in found] == ["a.b/c", "dir/sub/k1", "x.y.z/w", "q"]


def test_long_names_by_pax_and_gnu_hand_over_mid_shard() -> None:
    short = [(f"k{i:04d}.txt", b"%d" % i) for i in range(300)]
    long_key = "long/" + "n" * 150
    for form in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        data = tar_by_tarfile(short + [(long_key + ".txt", b"L"), (long_key + ".cls", b"7"), ("z.txt", b"z")], form)
        found, error = agree(data, ["txt", "cls"])
        assert error is None and found[-2:] == [(long_key, b"L", b"7"), ("z", b"z", None)]
    data = tar_by_tarfile([("ключ.txt", b"x"), ("ключ.cls", b"1")], tarfile.PAX_FORMAT)
    assert agree(data, ["txt", "cls"]) == ([("ключ", b"x", b"1")], None)


def test_a_tar_written_by_tarfile() -> None:
    members = [(f"{i:06d}.{f}", os.urandom(i * 37 % 3000)) for i in range(400) for f in ("jpg", "cls")]
    found, error = agree(tar_by_tarfile(members), ["jpg", "cls"])
    assert error is None and len(found) == 400


def test_a_tar_written_by_gnu_tar(tmp_path: Path) -> None:
    root = tmp_path / "files"
    (root / "d.v1").mkdir(parents=True)
    names = []
    for i in range(200):
        for field, size in (("jpg", i * 101 % 5000), ("json", 20)):
            name = f"d.v1/{i:05d}.{field}"
            (root / name).write_bytes(os.urandom(size))
            names.append(name)
    tar = tmp_path / "gnu.tar"
    subprocess.run(["tar", "--format=gnu", "-cf", str(tar), "-C", str(root), *names], check=True)
    found, error = agree(tar.read_bytes(), ["jpg", "json"])
    assert error is None and len(found) == 200 and found[0][0] == "d.v1/00000"
    subprocess.run(["tar", "--format=posix", "-cf", str(tar), "-C", str(root), "d.v1"], check=True)
    found, error = agree(tar.read_bytes(), ["jpg"])  # a directory member first: the exact parser's error
    assert found == [] and error is not None and "not a regular file" in error[0]


def test_key_only_reads_of_large_members_seek_like_the_exact_parser(tmp_path: Path) -> None:
    rows = [(f"k{i}", {"bin": os.urandom(100_000)}) for i in range(30)]
    data = ours(rows, ["bin"], tmp_path)
    assert agree(data, []) == ([(f"k{i}",) for i in range(30)], None)


# -- damage and broken rules: the same rows, then the same error ------------------------------------


def test_every_truncation_of_a_small_tar() -> None:
    data = b"".join(member(f"k{i}.{f}", os.urandom(i * 300)) for i in range(6) for f in ("a", "b")) + END
    for cut in range(0, len(data), 97):
        found, error = agree(data[:cut], ["a", "b"], [1024, 4096])
        assert error is not None
    assert agree(data[: len(data) - 512], ["a"], [1024, 4096])[1] is not None  # one end block only


@pytest.mark.parametrize(
    "case",
    [
        "checksum",
        "zero_block",
        "field_twice",
        "key_back",
        "directory",
        "no_dot",
        "leading_dot",
        "absolute",
        "dotdot",
        "not_utf8",
        "base256",
        "long_link_last",
    ],
)
def test_damage_and_broken_rules(case: str) -> None:
    good = b"".join(member(f"g{i:03d}.{f}", b"p" * (i * 7)) for i in range(150) for f in ("x", "y"))
    bad = {
        "checksum": bytes([ord("c")]) + member("a.x", b"1")[1:],
        "zero_block": member("a.x", b"1") + bytes(ustar.BLOCK) + member("b.x", b"2"),
        "field_twice": member("a.x", b"1") + member("a.y", b"2") + member("a.x", b"3"),
        "key_back": member("g005.z", b"1"),
        "directory": member("a.d", b"", typeflag=b"5"),
        "no_dot": member("abc", b"1"),
        "leading_dot": member("a/.x", b"1"),
        "absolute": member("/abs.x", b"1"),
        "dotdot": member("a/../b.x", b"1"),
        "not_utf8": member(b"\xff\xfe.x", b"1"),
        "base256": base256("a.x", b"1"),
        "long_link_last": member("././@LongLink", b"z" * 120 + b".x\0", typeflag=b"L"),
    }[case]
    data = good + bad + member("zz.x", b"9") + END
    found, error = agree(data, ["x", "y"], [4096, 1 << 20])
    if case in ("base256", "leading_dot"):  # valid for the exact parser ('a/.x' is key 'a/', field 'x')
        assert error is None and found[-1] == ("zz", b"9", None)
    elif case == "long_link_last":  # the long name is the next member's
        assert error is None and found[-1] == ("z" * 120, b"9", None)
    else:
        assert error is not None and len(found) >= 140, error


def test_the_reader_names_the_shard_of_a_damaged_tar(tmp_path: Path) -> None:
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    from spark_webdataset.spark.options import ReadOptions
    from spark_webdataset.spark.reader import ShardPartition, WebDatasetReader

    path = tmp_path / "cut.tar"
    path.write_bytes((b"".join(member(f"k{i}.bin", b"b" * 3000) for i in range(50)) + END)[:-2000])
    schema = StructType([StructField("__key__", StringType()), StructField("bin", BinaryType())])
    reader = WebDatasetReader(ReadOptions(str(path)), schema)
    with pytest.raises(TarFormatError) as error:
        list(reader.read(ShardPartition(str(path), 0)))
    assert error.value.shard == str(path) and str(path) in str(error.value)
    assert "truncated" in error.value.message


def test_our_shards_and_tarfiles_stay_on_the_fast_path(tmp_path: Path, monkeypatch) -> None:
    """The speed-up is only real if ordinary tars never hand over: with the exact parser gone,
    our shards and tarfile's (every chunk size) still read whole."""
    from spark_webdataset.format import fast_read

    def no_handover(*args, **kwargs):
        raise AssertionError("the fast path handed over to the exact parser")

    monkeypatch.setattr(fast_read, "_exact", no_handover)
    rows = [(f"k{i:03d}", {"bin": os.urandom(i * 211 % 5000), "cls": b"%d" % i}) for i in range(300)]
    members = [(f"{i:06d}.{f}", os.urandom(i * 37 % 3000)) for i in range(400) for f in ("jpg", "cls")]
    for data, count in ((ours(rows, ["bin", "cls"], tmp_path), 300), (tar_by_tarfile(members), 400)):
        for chunk in CHUNKS:
            found, error = fast(io.BytesIO(data), ["cls"], chunk)
            assert error is None and len(found) == count, chunk
