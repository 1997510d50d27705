"""The shard writer's two ways out: a local file's descriptor (os.writev) and any other stream.

Local files are written through their descriptor, many pieces a call, so
no payload is copied into a BufferedWriter first. The bytes must be the
same as through a plain stream, also when the kernel writes less than
asked, and with the sha256 option.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spark_webdataset.format import shard_writer
from spark_webdataset.format.encode import encode_column
from spark_webdataset.format.shard_writer import ShardInfo, ShardWriter


def _batch(rows: int, member_bytes: int) -> tuple[pa.Array, list[pa.Array]]:
    """Keys, a binary field of varied sizes around `member_bytes` (some null) and a text field."""
    rng = np.random.default_rng(7)
    sizes = rng.integers(member_bytes // 2, member_bytes * 2, size=rows)
    payloads = [rng.bytes(int(size)) if row % 5 else None for row, size in enumerate(sizes)]
    keys = pa.array([f"k/{row:05d}" for row in range(rows)], pa.string())
    return keys, [
        encode_column(pa.array(payloads, pa.binary()), "bin"),
        encode_column(pa.array([f"text {row}" for row in range(rows)]), "txt"),
    ]


def _write(open_shard, rows: int, member_bytes: int, **options) -> list[ShardInfo]:
    keys, columns = _batch(rows, member_bytes)
    writer = ShardWriter(["bin", "txt"], open_shard, **{"max_shard_bytes": 3 << 20, **options})
    half = rows // 2
    writer.write_batch(keys.slice(0, half), [column.slice(0, half) for column in columns])
    writer.write_batch(keys.slice(half), [column.slice(half) for column in columns])
    return writer.close()


def _to_files(tmp_path: Path, rows: int, member_bytes: int, **options) -> tuple[list[bytes], list[ShardInfo]]:
    paths: list[Path] = []

    def open_shard(sequence: int):
        paths.append(tmp_path / f"{sequence:06d}.tar")
        return open(paths[-1], "wb", buffering=1 << 20)

    infos = _write(open_shard, rows, member_bytes, **options)
    return [path.read_bytes() for path in paths], infos


class _Memory(io.RawIOBase):
    """A stream that is not a file: the writer must use its write()."""

    def __init__(self, store: list[bytes]) -> None:
        self.store = store
        self.parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        self.parts.append(bytes(data))
        return len(self.parts[-1])

    def close(self) -> None:
        if not self.closed:
            self.store.append(b"".join(self.parts))
        super().close()


def _to_memory(rows: int, member_bytes: int, **options) -> tuple[list[bytes], list[ShardInfo]]:
    store: list[bytes] = []
    infos = _write(lambda _: _Memory(store), rows, member_bytes, **options)
    return store, infos


@pytest.mark.parametrize("member_bytes", [300, 100 * 1024], ids=["joined", "direct"])
def test_file_descriptor_path_writes_the_stream_path_bytes(tmp_path: Path, member_bytes: int) -> None:
    rows, shard_bytes = (200, 64 * 1024) if member_bytes < 1024 else (60, 3 << 20)
    files, file_infos = _to_files(tmp_path, rows, member_bytes, max_shard_bytes=shard_bytes)
    streams, stream_infos = _to_memory(rows, member_bytes, max_shard_bytes=shard_bytes)
    assert len(files) > 1  # several shards, so shard boundaries are crossed in both paths
    assert files == streams
    assert file_infos == stream_infos
    for data, info in zip(files, file_infos):
        assert info.bytes == len(data)


def test_short_writes_resume_where_the_kernel_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.writev
    calls = []

    def short(fd: int, buffers) -> int:  # the real syscall, asked for at most 1000 bytes and a part of a piece
        calls.append(len(buffers))
        if len(calls) > 5000:  # a lost resume would rewrite the same bytes forever
            raise AssertionError("os.writev called again and again: a short write was not resumed")
        budget, parts = 1000 + len(calls) % 7, []
        for buffer in buffers:
            view = memoryview(buffer).cast("B")
            parts.append(view[:budget])
            budget -= len(parts[-1])
            if budget <= 0:
                break
        return real(fd, parts)

    monkeypatch.setattr(shard_writer.os, "writev", short)
    files, infos = _to_files(tmp_path, 40, 5000)
    monkeypatch.undo()
    streams, _ = _to_memory(40, 5000)
    assert len(calls) > 100
    assert files == streams
    assert [info.bytes for info in infos] == [len(data) for data in files]


def test_sha256_option_hashes_what_the_descriptor_wrote(tmp_path: Path) -> None:
    files, infos = _to_files(tmp_path, 60, 100 * 1024, checksum="sha256")
    assert [info.sha256 for info in infos] == [hashlib.sha256(data).hexdigest() for data in files]


@pytest.mark.parametrize("member_bytes", [300, 100 * 1024, 1536 * 1024], ids=["joined", "direct", "over-the-limit"])
def test_no_write_call_asks_for_more_than_write_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, member_bytes: int
) -> None:
    """A write(2) of 1 MiB or more fills large page-cache folios: 10x slower on a VM that hands
    free memory back to its host (shard_writer.WRITE_BYTES). Members larger than the limit are split."""
    real = os.writev
    asked: list[int] = []

    def spy(fd: int, buffers) -> int:
        asked.append(sum(memoryview(buffer).nbytes for buffer in buffers))
        return real(fd, buffers)

    monkeypatch.setattr(shard_writer.os, "writev", spy)
    rows = 4000 if member_bytes < 1024 else 12
    files, infos = _to_files(tmp_path, rows, member_bytes, max_shard_bytes=8 << 20)
    monkeypatch.undo()
    streams, _ = _to_memory(rows, member_bytes, max_shard_bytes=8 << 20)
    assert files == streams
    assert max(asked) <= shard_writer.WRITE_BYTES
    assert max(asked) > shard_writer.WRITE_BYTES // 2  # the limit, not tiny writes, bounds the calls
    assert sum(asked) == sum(info.bytes for info in infos)
