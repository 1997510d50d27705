"""Checksums that cost nothing (issue 11, item 1).

The writer records each shard's crc32c (computed while writing; no sha256
unless checksum=sha256); on gs:// the commit checks it against the
object's server-side crc32c; validation computes sha256 (and crc32c),
checks crc32c against the manifest and reports sha256 per shard; publish
puts it in shardindex.json. Old manifests carrying only sha256 validate.
Real Spark writes, real files, a real GCS API (the emulator): no fakes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from spark_webdataset import fault_points as faults
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.tree import STAGED_INDEX_NAME
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import BadOption, ChecksumMismatch, from_spark
from spark_webdataset.spark.options import WriteOptions
from tests.support.helpers import crc32c_text

SAMPLES = 60


def frame(spark, partitions: int = 2):
    """Distinct ~3 KiB binary payloads and a text field, in `partitions` partitions."""
    return spark.range(SAMPLES, numPartitions=partitions).selectExpr(
        "format_string('s/%04d', id) AS __key__",
        "unhex(repeat(sha2(cast(id AS string), 256), 48)) AS bin",
        "concat('label ', cast(id % 7 AS string)) AS txt",
    )


def write(spark, target: str, partitions: int = 2, **options: str) -> None:
    writer = frame(spark, partitions).write.format("webdataset").option("maxShardBytes", "40KiB")
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.mode("overwrite").save(target)


def manifest_of(version: Path) -> dict:
    return json.loads((version / "_manifest.json").read_text())


def flip_a_payload_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[512 + 100] ^= 0xFF  # inside the first member's payload: the tar stays well-formed
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def written(spark, tmp_path_factory) -> Path:
    """A dataset root with version v1 written with the default checksum (one Spark write)."""
    root = tmp_path_factory.mktemp("checksums")
    write(spark, str(root / "versions" / "v1"))
    return root


@pytest.fixture
def root(written, tmp_path) -> Path:
    copy = tmp_path / "root"
    shutil.copytree(written, copy)
    return copy


def test_the_manifest_records_crc32c_of_each_file_and_no_sha256_by_default(written) -> None:
    version = written / "versions" / "v1"
    document = manifest_of(version)
    assert document["options"]["checksum"] == "crc32c"
    assert len(document["shards"]) >= 4  # 60 samples of ~3.5 KiB under 40 KiB a shard, 2 partitions
    for entry in document["shards"]:
        data = (version / entry["name"]).read_bytes()
        assert entry["crc32c"] == crc32c_text(data)  # google_crc32c of the file, base64 big-endian
        assert "sha256" not in entry  # not computed while writing
        assert list(entry) == ["name", "samples", "bytes", "crc32c", "first_key", "last_key", "keys_ascending"]


def test_validation_reports_sha256_per_shard_and_publish_puts_it_in_the_index(root) -> None:
    version = root / "versions" / "v1"
    report = validate_version(str(version))
    assert report.ok, report.summary()
    names = [entry["name"] for entry in manifest_of(version)["shards"]]
    files = {name: (version / name).read_bytes() for name in names}
    validation = json.loads((version / "_validation.json").read_text())
    reported = {shard["name"]: shard for shard in validation["shards"]}
    assert reported.keys() == files.keys()
    for name, data in files.items():
        assert reported[name]["sha256"] == hashlib.sha256(data).hexdigest()
        assert reported[name]["crc32c"] == crc32c_text(data)

    publish(str(root), "v1")
    index = json.loads((version / "shardindex.json").read_text())
    assert [entry["url"] for entry in index["shardlist"]] == list(files)
    for entry in index["shardlist"]:
        data = files[entry["url"]]
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["crc32c"] == crc32c_text(data)
        assert entry["filesize"] == len(data)


def test_a_tampered_byte_fails_validation_on_crc32c_naming_the_shard(root) -> None:
    version = root / "versions" / "v1"
    flip_a_payload_byte(version / "shard-000001.tar")
    report = validate_version(str(version))
    assert not report.ok
    errors = [e for e in report.errors if "crc32c" in e["error"]]
    assert [e["shard"] for e in errors] == ["shard-000001.tar"], report.summary()
    assert "differs from the manifest" in errors[0]["error"]
    assert "shard shard-000001.tar" in report.summary()


def test_an_old_manifest_with_only_sha256_still_validates_and_publishes(root) -> None:
    version = root / "versions" / "v1"
    document = manifest_of(version)
    for entry in document["shards"]:  # the shape older writers wrote: sha256, no crc32c
        del entry["crc32c"]
        entry["sha256"] = hashlib.sha256((version / entry["name"]).read_bytes()).hexdigest()
    del document["options"]["checksum"]
    (version / "_manifest.json").write_text(json.dumps(document, indent=1) + "\n")

    report = validate_version(str(version))
    assert report.ok, report.summary()
    publish(str(root), "v1")
    index = json.loads((version / "shardindex.json").read_text())
    assert [e["sha256"] for e in index["shardlist"]] == [e["sha256"] for e in document["shards"]]

    # and its sha256 is still checked: a tampered byte fails on it
    flip_a_payload_byte(version / "shard-000000.tar")
    report = validate_version(str(version), write_report=False)
    failed = [e["shard"] for e in report.errors if "sha256" in e["error"]]
    assert failed == ["shard-000000.tar"], report.summary()


def test_option_checksum_sha256_writes_sha256_in_the_manifest_as_before(spark, tmp_path) -> None:
    version = tmp_path / "v"
    write(spark, str(version), partitions=1, checksum="SHA256")  # case-insensitive, like the other options
    document = manifest_of(version)
    assert document["options"]["checksum"] == "sha256"
    for entry in document["shards"]:
        data = (version / entry["name"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["crc32c"] == crc32c_text(data)
    report = validate_version(str(version), write_report=False)
    assert report.ok, report.summary()


def test_a_bad_checksum_value_is_a_bad_option_naming_option_and_values(spark, tmp_path) -> None:
    with pytest.raises(BadOption) as caught:
        WriteOptions.parse({"path": str(tmp_path / "v"), "checksum": "md5"})
    assert "checksum" in str(caught.value) and "'md5'" in str(caught.value)
    assert "crc32c" in str(caught.value) and "sha256" in str(caught.value)
    # through Spark: the driver refuses it before any task runs
    with pytest.raises(Exception) as caught:
        write(spark, str(tmp_path / "w"), partitions=1, checksum="md5")
    typed = from_spark(caught.value)
    assert isinstance(typed, BadOption), caught.value
    assert "checksum" in str(typed) and "crc32c, sha256" in str(typed)
    assert not (tmp_path / "w" / "_manifest.json").exists()


# -- gs:// ---------------------------------------------------------------------------------------


def gcs_blobs(uri: str) -> dict:
    from spark_webdataset.storage.gcs import client, split

    bucket, prefix = split(uri)
    return {b.name[len(prefix) + 1 :]: b for b in client().list_blobs(bucket, prefix=prefix + "/")}


def test_on_gcs_the_manifest_crc32c_is_the_objects_own(spark, bucket) -> None:
    from spark_webdataset.storage import storage_for

    version = f"{bucket}/data/versions/v1"
    write(spark, version)
    storage = storage_for(version)
    document = json.loads(storage.read_bytes(f"{version}/_manifest.json"))
    blobs = gcs_blobs(version)
    assert len(document["shards"]) >= 4
    for entry in document["shards"]:
        data = storage.read_bytes(f"{version}/{entry['name']}")
        assert entry["crc32c"] == crc32c_text(data)
        assert entry["crc32c"] == blobs[entry["name"]].crc32c  # the server's own, from the blob's metadata
    assert validate_version(version, workers=1).ok


def test_on_gcs_a_commit_fails_when_the_server_crc32c_differs_naming_the_shard(spark, bucket) -> None:
    # A real fault on the real emulator, no monkeypatching: after the task has uploaded its shard
    # (its index run, written after the shard is closed, is there), the staged object is replaced on
    # the server by bytes with one byte flipped, while the commit waits under its lock
    # (fault point commit:manifest-read sleeps). The commit then finds a server crc32c that is not the one the task computed.
    from spark_webdataset.storage.gcs import client, split

    version = f"{bucket}/data/versions/v1"
    bucket_name, staging_prefix = split(f"{version}/_staging/")
    done = threading.Event()
    corrupted: list[str] = []

    def corrupt_the_staged_shard() -> None:
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            names = {b.name for b in client().list_blobs(bucket_name, prefix=staging_prefix)}
            done_tasks = sorted(n for n in names if n.endswith("/" + STAGED_INDEX_NAME))
            staged = [n[: -len(STAGED_INDEX_NAME)] + "000000.tar" for n in done_tasks]
            if staged:
                blob = client().bucket(bucket_name).blob(staged[0])
                data = bytearray(blob.download_as_bytes())
                data[512 + 100] ^= 0xFF
                blob.upload_from_string(bytes(data))
                corrupted.append(staged[0])
                return
            time.sleep(0.05)

    thread = threading.Thread(target=corrupt_the_staged_shard, daemon=True)
    thread.start()
    try:
        with pytest.raises(Exception) as caught:
            with faults.installed({"commit:manifest-read": {"action": "sleep", "seconds": 4}}):
                write(spark, version, partitions=1, maxShardBytes="1MiB")
    finally:
        done.set()
        thread.join(30)
    assert corrupted, "the staged shard was never found"
    typed = from_spark(caught.value)
    assert isinstance(typed, ChecksumMismatch), caught.value
    assert "shard-000000.tar" in str(typed) and "crc32c" in str(typed)
    # nothing was decided: no manifest, no final shard, and the staged files are gone
    left = gcs_blobs(version)
    assert "_manifest.json" not in left and "shard-000000.tar" not in left
    assert not [name for name in left if name.startswith("_staging/") and name.endswith(".tar")]
