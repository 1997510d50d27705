"""`spark_webdataset.open(uri)`: random reads by key and position through the sample index.

Versions are written by real Spark jobs (batch, append, a stream's micro-batches), on local
disk and on the GCS emulator; what `open()` returns is compared byte for byte with what
Python's tarfile reads from the same shards. Requests are counted by wrapping the storage's
`read_range` (instrumentation: the real storage still serves every byte).
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import spark_webdataset
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import SampleMismatch
from spark_webdataset.format.sample_index import read_index, write_index
from spark_webdataset.storage import storage_for
from tests.support.helpers import manifest, run_cli
from tests.support.streaming_driver import stream
from tests.support.tars import tar_samples

pytestmark = pytest.mark.slow


def _frame(spark, start: int, count: int, partitions: int = 3):
    """Keys in no order within tasks (a shuffle), a binary, a text and a number field."""
    return (
        spark.range(start, start + count)
        .selectExpr(
            "format_string('s%06d', id) AS __key__",
            "unhex(sha2(cast(id AS STRING), 256)) AS bin",
            "repeat(concat('text ', id, ' '), cast(id % 13 AS INT)) AS txt",
            "CAST(id % 10 AS INT) AS cls",
        )
        .repartition(partitions)
    )


def _expected(storage_dir: str) -> dict[str, dict[str, bytes]]:
    """What tarfile reads from the version's shards (a gs:// version is downloaded first)."""
    storage = storage_for(storage_dir)
    names = sorted(n for n in storage.list_sizes(storage_dir) if n.endswith(".tar"))
    local = []
    for name in names:
        data = storage.read_bytes(storage.join(storage_dir, name))
        path = Path(f"/tmp/ra-{abs(hash(storage_dir))}-{name}")
        path.write_bytes(data)
        local.append(path)
    try:
        return tar_samples(local)
    finally:
        for path in local:
            path.unlink()


def _assert_reads_exactly(uri: str, expected: dict[str, dict[str, bytes]]) -> None:
    samples = spark_webdataset.open(uri)
    keys = sorted(expected)
    assert len(samples) == len(keys)
    assert list(samples.keys()) == keys
    for key in keys:
        got = samples.get(key)
        assert got.pop("__key__") == key
        assert got == expected[key], key
    assert [samples[i]["__key__"] for i in (0, 1, len(keys) // 2, -1)] == [
        keys[0],
        keys[1],
        keys[len(keys) // 2],
        keys[-1],
    ]
    with pytest.raises(KeyError):
        samples.get("s999999x")
    assert "s999999x" not in samples and keys[3] in samples
    with pytest.raises(IndexError):
        samples[len(keys)]


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_open_reads_every_sample_written_through_appends(spark, tmp_path, where, request) -> None:
    base = request.getfixturevalue("bucket") if where == "gcs" else str(tmp_path)
    version = f"{base}/data/versions/v1"
    _frame(spark, 0, 900).write.format("webdataset").option("maxShardBytes", "64KiB").mode("overwrite").save(version)
    _frame(spark, 900, 300, partitions=2).write.format("webdataset").mode("append").save(version)
    _frame(spark, 1200, 50, partitions=1).write.format("webdataset").mode("append").save(version)
    assert len(json.loads(storage_for(version).read_bytes(f"{version}/_manifest.json"))["shards"]) > 3
    _assert_reads_exactly(version, _expected(version))
    assert validate_version(version).ok
    # a dataset root reads its LATEST
    publish(f"{base}/data", "v1")
    assert len(spark_webdataset.open(f"{base}/data")) == 1250


def test_open_reads_a_streams_micro_batches(spark, tmp_path) -> None:
    source, version, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    source.mkdir()
    for batch, (start, count) in enumerate([(0, 40), (40, 25), (65, 30)]):
        rows = [{"__key__": f"{i:06d}", "txt": f"row {i}", "cls": i % 7} for i in range(start, start + count)]
        (source / f"{batch}.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    stream(
        spark, str(source), str(version), str(checkpoint), {"maxSamplesPerShard": "20"}, available_now=True
    ).awaitTermination()
    assert manifest(version)["run"]["streams"] == {str(checkpoint): 2}
    _assert_reads_exactly(str(version), tar_samples(sorted(version.glob("shard-*.tar"))))
    assert validate_version(str(version)).ok


def test_a_byte_flipped_after_publish_fails_the_read_naming_shard_and_offset(spark, tmp_path) -> None:
    root = tmp_path / "data"
    version = root / "versions" / "v1"
    _frame(spark, 0, 200).write.format("webdataset").mode("overwrite").save(str(version))
    assert validate_version(str(version)).ok
    publish(str(root), "v1")
    samples = spark_webdataset.open(str(root))
    target = samples.locate("s000077")
    assert target is not None
    shard = version / target.shard
    data = bytearray(shard.read_bytes())
    data[target.offset + 512 + 3] ^= 0x01  # inside the first member's payload
    shard.write_bytes(bytes(data))
    with pytest.raises(SampleMismatch) as failure:
        spark_webdataset.open(str(root)).get("s000077")
    assert target.shard in str(failure.value) and f"offset {target.offset}" in str(failure.value)
    assert spark_webdataset.open(str(root)).get("s000078")["__key__"] == "s000078"  # the others still read
    # the CLI: where a sample lies, one field's bytes, and the damaged one named
    described = json.loads(run_cli("get", str(root), "s000078").stdout)
    assert (described["key"], described["version"]) == ("s000078", str(version))
    assert described["fields"] == {
        "bin": 32,
        "txt": len(spark_webdataset.open(str(root)).get("s000078")["txt"]),
        "cls": 1,
    }
    field = subprocess.run(
        [sys.executable, "-m", "spark_webdataset.cli", "get", str(root), "s000078", "--field", "bin"],
        capture_output=True,
    )
    assert field.returncode == 0 and field.stdout == spark_webdataset.open(str(root)).get("s000078")["bin"]
    damaged, absent = run_cli("get", str(root), "s000077", "--field", "txt"), run_cli("get", str(root), "nope")
    assert damaged.returncode == 1 and f"offset {target.offset}" in damaged.stderr
    assert absent.returncode == 1 and "no sample with key 'nope'" in absent.stderr


@pytest.mark.parametrize("damage", ["one sample too few", "one byte too long"])
def test_validation_fails_on_an_index_off_by_one_sample_or_one_byte(spark, tmp_path, damage) -> None:
    version = tmp_path / "v"
    _frame(spark, 0, 300).write.format("webdataset").mode("overwrite").save(str(version))
    index_path = version / manifest(version)["sample_index"]
    index = read_index(index_path.read_bytes())
    if damage == "one sample too few":
        index = pa.concat_tables([index.slice(0, 100), index.slice(101)])
    else:
        lengths = index.column("length").to_pylist()
        lengths[150] += 1
        index = index.set_column(3, "length", pa.array(lengths, pa.int64()))
    write_index(index.to_batches(), str(index_path))
    report = validate_version(str(version))
    assert not report.ok
    assert any("sample index row 100" in e["error"] or "sample index row 150" in e["error"] for e in report.errors), (
        report.errors
    )


def test_a_warm_index_on_gcs_costs_one_request_a_sample(spark, bucket, monkeypatch) -> None:
    from spark_webdataset.storage.gcs import GCSStorage

    version = f"{bucket}/v"
    _frame(spark, 0, 400).write.format("webdataset").mode("overwrite").save(version)
    requests: list[tuple[str, int]] = []
    real = GCSStorage.read_range

    def counted(self, path: str, offset: int, length: int) -> bytes:
        requests.append((path.rsplit("/", 1)[-1], length))
        return real(self, path, offset, length)

    monkeypatch.setattr(GCSStorage, "read_range", counted)
    samples = spark_webdataset.open(version)
    samples.get("s000005")
    assert len(requests) == 3, requests  # cold: the index's footer, one block, the sample
    requests.clear()
    for key in ("s000100", "s000333", "s000007"):
        samples.get(key)
    assert [name.endswith(".tar") for name, _ in requests] == [True, True, True]

    clone = pickle.loads(pickle.dumps(samples))  # what a DataLoader worker gets: no client, no cache
    assert clone.get("s000100") == samples.get("s000100")
