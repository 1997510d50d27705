"""The format core alone: tar bytes read back by tarfile, GNU tar and webdataset."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pyarrow as pa
import pytest

from spark_webdataset.errors import TarFormatError, WebDatasetError
from spark_webdataset.format import ustar
from spark_webdataset.format.encode import encode_column
from spark_webdataset.format.sample_reader import iter_samples
from spark_webdataset.format.shard_writer import ShardWriter


def write_shards(tmp_path: Path, keys, columns: dict, **options) -> list[Path]:
    paths: list[Path] = []

    def open_shard(sequence: int):
        path = tmp_path / f"shard-{sequence:06d}.tar"
        paths.append(path)
        return open(path, "wb")

    writer = ShardWriter(list(columns), open_shard, **{"max_shard_bytes": 1 << 30, **options})
    encoded = [encode_column(pa.array(values), name) for name, values in columns.items()]
    writer.write_batch(pa.array(keys, pa.string()), encoded)
    writer.close()
    return paths


def test_small_members_match_tarfile_reading(tmp_path: Path) -> None:
    keys = [f"{i:04d}" for i in range(50)]
    columns = {
        "txt": [f"text {i}" for i in range(50)],
        "cls": [i % 7 for i in range(50)],
        "seg.png": [bytes([i]) * (i * 37) if i % 3 else None for i in range(50)],
    }
    [path] = write_shards(tmp_path, keys, columns)
    with tarfile.open(path) as tar:
        members = tar.getmembers()
        assert [m.name for m in members][:4] == ["0000.txt", "0000.cls", "0001.txt", "0001.cls"]
        for member in members:
            assert member.mode == 0o444 and member.uid == 0 and member.uname == "" and member.mtime == 0
            assert member.isreg()
        assert tar.extractfile("0007.cls").read() == b"0"
        assert tar.extractfile("0008.seg.png").read() == bytes([8]) * (8 * 37)
        assert "0009.seg.png" not in {m.name for m in members}
    assert path.stat().st_size % 512 == 0
    samples = list(iter_samples(open(path, "rb")))
    assert [s.key for s in samples] == keys
    assert samples[1].fields == {"txt": b"text 1", "cls": b"1", "seg.png": bytes([1]) * 37}


def test_large_members_take_the_direct_path_with_same_bytes(tmp_path: Path) -> None:
    keys = ["a/0", "a/1", "b/2"]
    payloads = [bytes(range(256)) * 400, b"x" * 100_000, b"y" * 70_001]
    [direct] = write_shards(tmp_path, keys, {"bin": payloads})
    with tarfile.open(direct) as tar:
        assert [tar.extractfile(m).read() for m in tar.getmembers()] == payloads


def test_shards_roll_at_the_exact_byte_cap(tmp_path: Path) -> None:
    keys = [f"{i:03d}" for i in range(40)]
    cap = 512 * 20 + 1024  # 10 samples of 2 blocks each
    paths = write_shards(tmp_path, keys, {"txt": ["z" * 300] * 40}, max_shard_bytes=cap)
    assert len(paths) == 4
    assert all(p.stat().st_size == cap for p in paths)
    result = subprocess.run(["tar", "-tvf", str(paths[0])], capture_output=True, text=True, check=True)
    assert result.stdout.count(".txt") == 10


def test_lone_oversize_sample_gets_its_own_shard(tmp_path: Path) -> None:
    paths = write_shards(tmp_path, ["a", "b", "c"], {"bin": [b"1", b"2" * 5000, b"3"]}, max_shard_bytes=4096)
    sizes = [p.stat().st_size for p in paths]
    assert len(paths) == 3 and sizes[1] > 4096 and sizes[0] <= 4096 and sizes[2] <= 4096


def test_sample_cap(tmp_path: Path) -> None:
    paths = write_shards(tmp_path, [str(i) for i in range(7)], {"txt": ["x"] * 7}, max_samples_per_shard=3)
    assert [len(list(iter_samples(open(p, "rb")))) for p in paths] == [3, 3, 1]


@pytest.mark.parametrize(
    "key, rule",
    [
        ("a.b", "holds a '.'"),
        ("/abs", "starts with '/'"),
        (".hidden", "starts with '.'"),
        ("a/../b", "'..' path segment"),
        ("x/__meta__/y", "shaped __x__"),
        ("", "empty"),
        (None, "null"),
        ("a\x00b", "NUL"),
        ("dir/", "ends with '/'"),
    ],
)
def test_invalid_keys_are_named(tmp_path: Path, key, rule: str) -> None:
    with pytest.raises(WebDatasetError, match="invalid sample key") as error:
        write_shards(tmp_path, ["ok", key], {"txt": ["a", "b"]})
    assert rule in str(error.value)


def test_long_names_need_pax(tmp_path: Path) -> None:
    key = "k" * 98
    with pytest.raises(WebDatasetError, match="102 bytes.*allowPax"):
        write_shards(tmp_path, [key], {"txt": ["a"]})
    with pytest.raises(WebDatasetError, match="not ASCII"):
        write_shards(tmp_path, ["ключ"], {"txt": ["a"]})
    [path] = write_shards(tmp_path, [key, "ключ"], {"txt": ["a", "b"]}, allow_pax=True)
    with tarfile.open(path) as tar:
        assert tar.getnames() == [key + ".txt", "ключ.txt"]
    assert [s.key for s in iter_samples(open(path, "rb"))] == [key, "ключ"]


def test_all_null_sample_is_an_error_not_a_loss(tmp_path: Path) -> None:
    with pytest.raises(WebDatasetError, match="'b'.*every field is null"):
        write_shards(tmp_path, ["a", "b"], {"txt": ["x", None], "cls": [1, None]})


def test_header_template_matches_tarfile_checksum() -> None:
    header = ustar.build_header(ustar.header_template(0), b"abc.txt", 1234)
    info = tarfile.TarInfo.frombuf(header, "utf-8", "strict")
    assert (info.name, info.size, info.mode, info.mtime) == ("abc.txt", 1234, 0o444, 0)


def test_reader_reports_truncation_with_offset(tmp_path: Path) -> None:
    [path] = write_shards(tmp_path, ["a", "b"], {"txt": ["x" * 600, "y"]})
    data = path.read_bytes()[:1500]
    with pytest.raises(TarFormatError, match="offset 0.*truncated"):
        list(iter_samples(io.BytesIO(data)))
