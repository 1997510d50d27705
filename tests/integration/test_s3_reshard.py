"""jobs/reshard.py with source and target on s3:// (moto server): same samples, same member bytes,
new shards in the source order under the byte cap, committed with the server's crc32c."""

from __future__ import annotations

import io
import tarfile

import pytest

from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.format.manifest import Manifest
from spark_webdataset.jobs.reshard import parser, reshard
from spark_webdataset.storage import storage_for
from tests.support.helpers import crc32c_text

pytestmark = pytest.mark.slow
ROWS = 120
CAP = 32 * 1024


def _manifest(version: str) -> Manifest:
    return Manifest.from_json(storage_for(version).read_bytes(f"{version}/_manifest.json"))


def _samples(version: str) -> list[tuple[str, bytes, bytes]]:
    """Every sample in shard order, then tar order within a shard, read through our s3 Storage."""
    storage = storage_for(version)
    found: dict[str, dict[str, bytes]] = {}
    for shard in _manifest(version).shards:
        with tarfile.open(fileobj=io.BytesIO(storage.read_bytes(f"{version}/{shard.name}"))) as tar:
            for member in tar.getmembers():
                key, _, field = member.name.partition(".")
                found.setdefault(key, {})[field] = tar.extractfile(member).read()
    return [(key, fields["bin"], fields["cls"]) for key, fields in found.items()]


def test_reshard_from_s3_to_s3_keeps_samples_order_and_the_byte_cap(spark, s3_bucket) -> None:
    source = f"{s3_bucket}/src/versions/v1"
    (
        spark.range(0, ROWS, numPartitions=3)
        .selectExpr(
            "format_string('k%04d', (id * 37) % 120) AS __key__",  # keys out of step with the row order
            "concat(cast(format_string('s%04d:', id) AS binary), unhex(repeat('5a', (id * 7919) % 4000 + 100))) AS bin",
            "id % 10 AS cls",
        )
        .write.format("webdataset")
        .option("maxShardBytes", "128KiB")
        .mode("overwrite")
        .save(source)
    )
    before = _samples(source)
    assert len(before) == ROWS and [k for k, _, _ in before] != sorted(k for k, _, _ in before)

    root = f"{s3_bucket}/out"
    args = parser().parse_args(
        ["--input", source, "--output", root, "--version", "r", "--max-shard-bytes", "32KiB", "--order", "source"]
    )
    summary = reshard(spark, args)
    target = f"{root}/versions/r"
    assert _samples(target) == before  # every key at its place, bytes unchanged

    storage = storage_for(target)
    shards = _manifest(target).shards
    assert summary["shards"] == len(shards) >= 8
    sizes, server_crcs = storage.list_sizes(target), storage.crc32c_below(target)
    for shard in shards:
        assert sizes[shard.name] == shard.bytes <= CAP, f"{shard.name} holds {sizes[shard.name]} bytes"
        assert crc32c_text(storage.read_bytes(f"{target}/{shard.name}")) == shard.crc32c == server_crcs[shard.name]
    assert storage.list_dirs(target) == ["_index"]  # no staging left
    report = validate_version(target, workers=2)
    assert report.ok, report.summary()
    assert _samples(source) == before  # the source is untouched
