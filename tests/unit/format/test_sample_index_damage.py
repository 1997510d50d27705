"""A damaged sample index or manifest is a typed error naming the file, with bounded memory.

Versions come from the real ShardWriter and index writer (no Spark); the damage is done to the
files as a hostile user or a broken disk would: the index truncated or replaced by garbage, its
rows rewritten (offsets, lengths, locations, a row pointing at another intact sample), the
manifest made not JSON, of wrong types or negative sizes. `open()`, its `get`/`[i]` and the CLI's
`get` must answer with an error of ours (the CLI: exit code, no traceback), never ArrowInvalid,
MemoryError, OSError or a sample under the wrong key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spark_webdataset
from spark_webdataset.errors import (
    EXIT_FAILED,
    CorruptIndex,
    CorruptManifest,
    SampleMismatch,
    WebDatasetError,
)
from spark_webdataset.format.sample_index import INDEX_SCHEMA, read_index, write_index
from tests.support.helpers import run_cli
from tests.support.python_memory import PythonPeak
from tests.support.webdataset_ui_data import commit_table

KEYS = 60


def build(root: Path, samples: int = KEYS) -> Path:
    """A committed version of `samples` small samples (varied sizes) in shards of 8 KiB."""
    table = pa.table({"id": list(range(samples)), "txt": [f"text {i} ".encode() * (i % 9 + 1) for i in range(samples)]})
    return commit_table(root, "v1", table, fields=[("txt", "txt", "binary")], max_shard_bytes=8192)


def index_path(version: Path) -> Path:
    return version / json.loads((version / "_manifest.json").read_text())["sample_index"]


def set_index_bytes(version: Path, data: bytes) -> None:
    """Replace the index file's bytes, and the manifest's size of it to match (an unpublished version)."""
    index_path(version).write_bytes(data)
    document = json.loads((version / "_manifest.json").read_text())
    document["sample_index_bytes"] = len(data)
    (version / "_manifest.json").write_text(json.dumps(document))


def rewrite_rows(version: Path, change) -> None:
    """The index rewritten with `change(rows)` (a list of dicts in key order), the manifest's size updated."""
    rows = read_index(index_path(version).read_bytes()).to_pylist()
    rows = change(rows)
    sink = pa.BufferOutputStream()
    write_index([pa.RecordBatch.from_pylist(rows, schema=INDEX_SCHEMA)], sink)
    set_index_bytes(version, sink.getvalue().to_pybytes())


def set_row(key: str, **values):
    def change(rows: list[dict]) -> list[dict]:
        for row in rows:
            if row["key"] == key:
                row.update(values)
        return rows

    return change


@pytest.fixture
def version(tmp_path: Path) -> Path:
    return build(tmp_path / "root")


def test_the_built_version_reads_back(version: Path) -> None:
    samples = spark_webdataset.open(str(version))
    assert len(samples) == KEYS and samples.get("00007")["txt"] == b"text 7 " * 8


@pytest.mark.parametrize("cut", [0.5, 0.97, 8], ids=["half", "footer cut", "8 bytes"])
def test_a_truncated_index_is_a_typed_error_naming_the_file(version: Path, cut: float) -> None:
    data = index_path(version).read_bytes()
    keep = int(len(data) * cut) if cut < 1 else int(cut)
    index_path(version).write_bytes(data[:keep])  # the manifest still says the old size
    with pytest.raises(CorruptIndex) as caught:
        spark_webdataset.open(str(version)).get("00007")
    assert str(index_path(version)) in str(caught.value)


@pytest.mark.parametrize(
    "data",
    [b"", b"garbage" * 100, b"PAR1" + bytes(200) + b"PAR1"],
    ids=["empty", "not parquet", "parquet magic, garbage footer"],
)
def test_a_garbage_index_is_a_typed_error_naming_the_file(version: Path, data: bytes) -> None:
    set_index_bytes(version, data)
    with pytest.raises(CorruptIndex) as caught:
        spark_webdataset.open(str(version)).get("00007")
    assert str(index_path(version)) in str(caught.value)


def test_an_index_of_other_columns_is_a_typed_error(version: Path) -> None:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"key": ["00007"], "offset": ["zero"]}), sink)
    set_index_bytes(version, sink.getvalue().to_pybytes())
    with pytest.raises(CorruptIndex) as caught:
        spark_webdataset.open(str(version)).get("00007")
    assert str(index_path(version)) in str(caught.value) and "offset" in str(caught.value)


@pytest.mark.parametrize(
    "values, rule",
    [
        ({"length": 2**40}, "past the end"),
        ({"offset": -512}, "offset"),
        ({"length": 0}, "length"),
        ({"length": -1024}, "length"),
        ({"offset": 2**62, "length": 2**62}, "past the end"),
        ({"offset": 100}, "512"),
        ({"shard": "../../../etc/passwd"}, "shard"),
        ({"shard": "shard-000999.tar"}, "shard"),
        ({"offset": None}, "offset"),
        ({"length": None}, "length"),
        ({"crc32c": None}, "crc32c"),
        ({"shard": None}, "shard"),
    ],
)
def test_an_index_row_outside_its_shard_is_refused_before_any_read(version: Path, values: dict, rule: str) -> None:
    rewrite_rows(version, set_row("00007", **values))
    samples = spark_webdataset.open(str(version))
    with PythonPeak() as measured, pytest.raises(CorruptIndex) as caught:
        samples.get("00007")
    assert measured.peak < 16 << 20
    assert str(index_path(version)) in str(caught.value) and "'00007'" in str(caught.value)
    assert rule in str(caught.value)
    assert samples.get("00008")["txt"] == b"text 8 " * 9  # the other rows still read


def test_a_null_key_row_is_refused(version: Path) -> None:
    rewrite_rows(version, lambda rows: [{**rows[0], "key": None}, *rows[1:]])
    samples = spark_webdataset.open(str(version))
    with pytest.raises(CorruptIndex):
        samples[0]


def test_an_index_row_pointing_at_another_intact_sample_is_a_sample_mismatch(version: Path) -> None:
    """The mutation of issue 29: `open()` must check the bytes it read hold the key asked for."""
    samples = spark_webdataset.open(str(version))
    other = samples.locate("00030")
    assert other is not None and other.shard != samples.locate("00007").shard
    rewrite_rows(
        version, set_row("00007", shard=other.shard, offset=other.offset, length=other.length, crc32c=other.crc32c)
    )
    samples = spark_webdataset.open(str(version))
    with pytest.raises(SampleMismatch) as caught:
        samples.get("00007")
    assert "'00007'" in str(caught.value) and "00030" in str(caught.value)
    with pytest.raises(SampleMismatch):
        samples[7]


def test_a_flipped_payload_byte_is_a_sample_mismatch(version: Path) -> None:
    samples = spark_webdataset.open(str(version))
    entry = samples.locate("00007")
    shard = version / entry.shard
    data = bytearray(shard.read_bytes())
    data[entry.offset + 512 + 2] ^= 0x20
    shard.write_bytes(bytes(data))
    with pytest.raises(SampleMismatch) as caught:
        samples.get("00007")
    assert entry.shard in str(caught.value)


def test_a_lying_manifest_and_index_keep_memory_bounded(version: Path) -> None:
    """Shard bytes and a row's length both 2**40: what is read is what the shard holds, in pieces."""
    document = json.loads((version / "_manifest.json").read_text())
    entry = spark_webdataset.open(str(version)).locate("00007")
    for shard in document["shards"]:
        if shard["name"] == entry.shard:
            shard["bytes"] = 2**40
    (version / "_manifest.json").write_text(json.dumps(document))
    rewrite_rows(version, set_row("00007", length=2**40))
    samples = spark_webdataset.open(str(version))
    with PythonPeak() as measured, pytest.raises(SampleMismatch):
        samples.get("00007")
    assert measured.peak < 64 << 20


@pytest.mark.parametrize(
    "change",
    [
        lambda text: "{not json",
        lambda text: "[1, 2]",
        lambda text: "\udcff",
        lambda text: json.dumps({**json.loads(text), "shards": "shard-000000.tar"}),
        lambda text: json.dumps({**json.loads(text), "shards": [{"name": 7}]}),
        lambda text: json.dumps({**json.loads(text), "shards": [{**json.loads(text)["shards"][0], "bytes": -1}]}),
        lambda text: json.dumps({**json.loads(text), "shards": [{**json.loads(text)["shards"][0], "samples": "3"}]}),
        lambda text: json.dumps(
            {**json.loads(text), "shards": [{**json.loads(text)["shards"][0], "name": "../x.tar"}]}
        ),
        lambda text: json.dumps({**json.loads(text), "sample_index_bytes": -5}),
        lambda text: json.dumps({**json.loads(text), "sample_index": "/etc/passwd"}),
        lambda text: json.dumps({**json.loads(text), "fields": {"txt": "binary"}}),
        lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "shards"}),
    ],
    ids=[
        "not json",
        "a list",
        "not utf-8",
        "shards a string",
        "shard name a number",
        "negative bytes",
        "samples a string",
        "shard name with ..",
        "negative index size",
        "absolute index path",
        "fields a dict",
        "no shards",
    ],
)
def test_a_garbage_manifest_is_a_typed_error_naming_the_file(version: Path, change) -> None:
    manifest = version / "_manifest.json"
    text = change(manifest.read_text())
    manifest.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(CorruptManifest) as caught:
        spark_webdataset.open(str(version)).get("00007")
    assert str(manifest) in str(caught.value)


def test_cli_get_names_a_damaged_index_without_a_traceback(version: Path) -> None:
    data = index_path(version).read_bytes()
    index_path(version).write_bytes(data[: len(data) // 2])
    done = run_cli("get", str(version), "00007")
    assert done.returncode == EXIT_FAILED, done
    assert "Traceback" not in done.stderr and str(index_path(version)) in done.stderr, done.stderr


def test_cli_get_names_a_row_out_of_bounds_without_a_traceback(version: Path) -> None:
    rewrite_rows(version, set_row("00007", length=2**40))
    done = run_cli("get", str(version), "00007")
    assert done.returncode == EXIT_FAILED and "Traceback" not in done.stderr, done.stderr
    assert "'00007'" in done.stderr
    assert run_cli("get", str(version), "00008").returncode == 0


def test_errors_are_ours(version: Path) -> None:
    assert issubclass(CorruptIndex, WebDatasetError) and issubclass(CorruptManifest, WebDatasetError)


@pytest.mark.parametrize(
    "text", ["{not json", '{"__kind__": "spark-webdataset-manifest-v1", "shards": [{"name": "../../x.tar"}]}']
)
def test_the_spark_readers_planning_names_a_garbage_manifest(version: Path, text: str) -> None:
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_webdataset.spark.options import ReadOptions
    from spark_webdataset.spark.reader import WebDatasetReader

    (version / "_manifest.json").write_text(text)
    with pytest.raises(CorruptManifest) as caught:
        WebDatasetReader(ReadOptions(str(version)), StructType([StructField("__key__", StringType())]))
    assert str(version / "_manifest.json") in str(caught.value)


def test_a_manifest_placing_a_shard_outside_its_version_is_refused(version: Path) -> None:
    """Well-typed, but `../../x.tar` is not a shard location: nothing outside the version is opened."""
    document = json.loads((version / "_manifest.json").read_text())
    document["shards"][0]["name"] = "../../outside.tar"
    (version / "_manifest.json").write_text(json.dumps(document))
    with pytest.raises(CorruptManifest) as caught:
        spark_webdataset.open(str(version))
    assert str(version / "_manifest.json") in str(caught.value) and "outside.tar" in str(caught.value)
