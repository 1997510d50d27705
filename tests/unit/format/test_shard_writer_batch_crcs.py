"""The writer's per-sample crc32c, computed batch-wise (issue 30).

The shard writer hashes each byte once: the sink extends the shard's crc32c
piece by piece (in C, no Python call a sample), and a sample's own crc32c
follows from the shard's crc32c before and after it (`slice_crcs`, crc32c
being linear). These tests check the results against google_crc32c over the
bytes actually written, and pin the bytes themselves: the shards and index
rows must stay byte-identical to what the writer wrote before the change.
"""

from __future__ import annotations

import hashlib
import io

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest

from spark_webdataset.format.checksums import crc32c_prefixes, slice_crcs
from spark_webdataset.format.encode import encode_column
from spark_webdataset.format.sample_index import TASK_SCHEMA, concat_rows
from spark_webdataset.format.shard_writer import ShardWriter


class _Keep(io.BytesIO):
    """A shard kept in memory after close (not a file: the writer uses write())."""

    def close(self) -> None:
        self.kept = self.getvalue()
        super().close()


def _slices(rng: np.random.Generator, total: int, cuts: int) -> np.ndarray:
    inner = np.sort(rng.integers(0, total, cuts))
    return np.concatenate([[0], inner, [total]]).astype(np.int64)


@pytest.mark.parametrize("start", [0, 1, 0xFFFFFFFF, 0x12345678])
def test_slice_crcs_equal_google_crc32c_of_each_slice(start: int) -> None:
    rng = np.random.default_rng(start & 0xFFFF)
    data = rng.integers(0, 256, 3 << 20, dtype=np.uint8)
    bounds = _slices(rng, len(data), 400)
    bounds = np.sort(np.concatenate([bounds, bounds[5:9]]))  # some empty slices too
    # a few long slices (lengths with high bits set) and many short ones
    prefixes = crc32c_prefixes(start, [data[a:b] for a, b in zip(bounds[:-1], bounds[1:])])
    assert prefixes[0] == start
    assert prefixes[-1] == google_crc32c.extend(start, data.tobytes())
    crcs = slice_crcs(prefixes, np.diff(bounds))
    expected = [google_crc32c.value(data[a:b].tobytes()) for a, b in zip(bounds[:-1], bounds[1:])]
    assert crcs.dtype == np.uint32
    assert crcs.tolist() == expected


def test_slice_crcs_of_equal_lengths_and_of_none() -> None:
    data = np.random.default_rng(3).integers(0, 256, 2560 * 50, dtype=np.uint8)
    rows = data.reshape(50, 2560)
    prefixes = crc32c_prefixes(7, rows)
    assert slice_crcs(prefixes, np.full(50, 2560)).tolist() == [google_crc32c.value(row.tobytes()) for row in rows]
    assert slice_crcs([7], np.zeros(0, np.int64)).tolist() == []


def _columns(rng: np.random.Generator, rows: int, member_bytes: int, nulls: bool, varied: bool) -> list[pa.Array]:
    sizes = rng.integers(member_bytes // 2, member_bytes * 2, size=rows) if varied else np.full(rows, member_bytes)
    payloads = [rng.bytes(int(size)) if not nulls or row % 7 else None for row, size in enumerate(sizes)]
    return [
        encode_column(pa.array(payloads, pa.binary()), "bin"),
        encode_column(pa.array([row % 10 for row in range(rows)], pa.int32()), "cls"),
    ]


# name: (rows, member bytes, nulls, varied sizes, key prefix, writer options)
CASES = {
    "small-uniform": (3000, 1024, False, False, "k", {}),
    "small-varied-nulls": (2500, 700, True, True, "a/b", {}),
    "small-sha256-capped": (2000, 900, True, True, "s", {"checksum": "sha256", "max_samples_per_shard": 333}),
    "large-direct": (40, 100 * 1024, True, True, "big", {}),
    "pax-long-names": (300, 600, True, True, "x" * 120, {"allow_pax": True}),
}


def _write(case: str) -> tuple[list[bytes], pa.RecordBatch, list]:
    rows, member_bytes, nulls, varied, prefix, options = CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    keys = pa.array([f"{prefix}{row:06d}" for row in range(rows)], pa.string())
    columns = _columns(rng, rows, member_bytes, nulls, varied)
    streams: list[_Keep] = []

    def open_shard(_sequence: int) -> _Keep:
        streams.append(_Keep())
        return streams[-1]

    writer = ShardWriter(["bin", "cls"], open_shard, **{"max_shard_bytes": 1 << 20, **options})
    cuts = [0, rows // 3, rows // 3 + 1, rows]  # three batches, one of a single sample
    for low, high in zip(cuts[:-1], cuts[1:]):
        writer.write_batch(keys.slice(low, high - low), [column.slice(low, high - low) for column in columns])
    infos = writer.close()
    return [stream.kept for stream in streams], concat_rows(writer.index_rows, TASK_SCHEMA), infos


@pytest.mark.parametrize("case", sorted(CASES))
def test_index_crc32c_is_google_crc32c_of_each_samples_bytes(case: str) -> None:
    shards, rows, infos = _write(case)
    assert len(shards) > 1 or case == "large-direct"
    assert rows.num_rows == CASES[case][0]
    table = rows.to_pydict()
    for key, shard, offset, length, crc in zip(*(table[name] for name in TASK_SCHEMA.names)):
        sample = shards[shard][offset : offset + length]
        assert len(sample) == length and length % 512 == 0
        assert sample[100:108] == b"0000444\0" and sample[: len(key)] == key.encode()[:100] or case.startswith("pax")
        assert crc == google_crc32c.value(sample), (case, key)
    for info, data in zip(infos, shards):
        assert info.bytes == len(data)
        assert info.crc32c == _b64_crc(data)
        if info.sha256 is not None:
            assert info.sha256 == hashlib.sha256(data).hexdigest()


def _b64_crc(data: bytes) -> str:
    import base64

    return base64.b64encode(google_crc32c.value(data).to_bytes(4, "big")).decode()


# sha256 of every shard's bytes, then of the index rows' IPC bytes, as the writer wrote them before
# the crc32c went batch-wise (the commit before it, 8e42b39): the output must not change by a byte.
GOLDEN = {
    "small-uniform": "9a00c3dadc6b0a83a9aae1cc776c3b90a3dafc5663e91ee2a07ff7efbbd7f4d8",
    "small-varied-nulls": "2f749a35d1af2b0c2b197ef296ca1e44e508d67e5d8b2b67f4dc0d35973a6f07",
    "small-sha256-capped": "d0f1538776cbd6566f633b15093c1eadfe6729ad05c679cea89f4d8eef767a1f",
    "large-direct": "0e6d3e155b910fe2bad6d773c9923775ef0b0902c13527c16cc5238699b66f07",
    "pax-long-names": "49ed9e0a38d15e1f681243980f13647607fbca6cd82c645c17cd56ced4a6ce90",
}


def _digest(case: str) -> str:
    shards, rows, infos = _write(case)
    digest = hashlib.sha256()
    for data in shards:
        digest.update(hashlib.sha256(data).digest())
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, TASK_SCHEMA) as ipc:
        ipc.write_batch(rows)
    digest.update(sink.getvalue().to_pybytes())
    digest.update(repr([(i.samples, i.bytes, i.crc32c, i.first_key, i.last_key, i.sha256) for i in infos]).encode())
    return digest.hexdigest()


@pytest.mark.parametrize("case", sorted(CASES))
def test_output_is_byte_identical_to_the_writer_before(case: str) -> None:
    assert _digest(case) == GOLDEN[case]


if __name__ == "__main__":  # prints GOLDEN for the writer on PYTHONPATH
    for name in sorted(CASES):
        print(f'    "{name}": "{_digest(name)}",')


def test_the_sink_reports_the_crc32c_at_every_piece_bound_empty_pieces_included() -> None:
    from spark_webdataset.format.shard_writer import _HashingSink

    stream = io.BytesIO()
    sink = _HashingSink(stream)
    pieces = [b"", b"", np.frombuffer(b"abc", np.uint8), b"", b"de"]
    prefixes = sink.write_pieces(pieces)
    assert len(prefixes) == len(pieces) + 1
    assert slice_crcs(prefixes, [len(p) for p in pieces]).tolist() == [google_crc32c.value(bytes(p)) for p in pieces]
    assert sink.write_pieces([b"", b""]) == [sink.crc] * 3
    assert stream.getvalue() == b"abcde" and sink.size == 5
