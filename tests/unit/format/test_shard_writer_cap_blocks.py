"""maxShardBytes to the block: samples of mixed sizes, a shard exactly at the cap, one sample a block too many.

Every other cap test writes samples of one size (2 blocks each), so a cap
loosened by one 512-byte block never shows: the next sample always needs
two. Here samples take 2 or 3 blocks, so one shard fills the cap exactly
and the next would overshoot it by exactly one block: a writer that
allowed that block would write a shard of cap + 512 bytes.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pyarrow as pa
import pytest

from spark_webdataset.format import ustar
from spark_webdataset.format.encode import encode_column
from spark_webdataset.format.sample_reader import iter_samples
from spark_webdataset.format.shard_writer import ShardWriter

TWO_BLOCKS = "y" * 100  # header + one payload block: 1024 tar bytes
THREE_BLOCKS = "x" * 600  # header + two payload blocks: 1536 tar bytes
END = len(ustar.END_OF_ARCHIVE)  # 1024
CAP = END + 4096

# (payload, tar bytes); shard 0: 1536 + 1024 + 1536 = 4096, the cap exactly (with the end blocks).
# shard 1: 1536 + 1536 = 3072; the next sample (1536) would make 4608, one block over the cap.
SAMPLES = [THREE_BLOCKS, TWO_BLOCKS, THREE_BLOCKS, THREE_BLOCKS, THREE_BLOCKS, THREE_BLOCKS, TWO_BLOCKS]
EXPECTED_SIZES = [CAP, 3072 + END, 2560 + END]
EXPECTED_KEYS = [["k0", "k1", "k2"], ["k3", "k4"], ["k5", "k6"]]


def write(tmp_path: Path, batch: int) -> list[Path]:
    paths: list[Path] = []

    def open_shard(sequence: int):
        path = tmp_path / f"shard-{sequence:06d}.tar"
        paths.append(path)
        return open(path, "wb")

    writer = ShardWriter(["txt"], open_shard, max_shard_bytes=CAP)
    keys = [f"k{i}" for i in range(len(SAMPLES))]
    for start in range(0, len(SAMPLES), batch):
        column = encode_column(pa.array(SAMPLES[start : start + batch]), "txt")
        writer.write_batch(pa.array(keys[start : start + batch], pa.string()), [column])
    infos = writer.close()
    assert [info.bytes for info in infos] == [p.stat().st_size for p in paths]
    assert not any(info.oversize for info in infos)
    return paths


@pytest.mark.parametrize("batch", [len(SAMPLES), 1, 2], ids=["one batch", "a sample a batch", "pairs"])
def test_a_shard_fills_the_cap_to_the_byte_and_never_takes_one_block_more(tmp_path: Path, batch: int) -> None:
    paths = write(tmp_path, batch)
    sizes = [p.stat().st_size for p in paths]
    assert sizes == EXPECTED_SIZES  # shard 0 is exactly the cap; shard 1 stops a block short of overshooting it
    assert all(size <= CAP for size in sizes)
    assert [[s.key for s in iter_samples(open(p, "rb"))] for p in paths] == EXPECTED_KEYS
    with tarfile.open(paths[0]) as tar:
        assert [m.size for m in tar.getmembers()] == [600, 100, 600]
