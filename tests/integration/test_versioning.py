"""The versioning promise on every public path (docs/design.md "The versioning promise").

Real Spark writes, real publish/validate, local disk and the GCS emulator.
Faults are injected only where the real part cannot fail on demand: the
commit's fault points (spark_webdataset.fault_points: the committer exits
after its renames, sleeps there, or sleeps under its lock) and, for dead
staging, file times set back.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from spark_webdataset import fault_points as faults
from spark_webdataset.dataset.layout import Dataset, Version
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import (
    BadOption,
    DuplicateKey,
    FieldMismatch,
    InvalidField,
    InvalidKey,
    ManifestChanged,
    NotCommitted,
    TarFormatError,
    VersionSealed,
)
from spark_webdataset.spark.reader import resolve
from tests.support.helpers import raised, write

pytestmark = pytest.mark.slow


def frame(spark, start: int, count: int, prefix: str = "k", partitions: int = 2):
    return spark.range(start, start + count, numPartitions=partitions).selectExpr(
        f"format_string('{prefix}%05d', id) AS __key__", "repeat('x', CAST(id % 7 * 100 AS INT)) AS txt", "id AS cls"
    )


def published_root(spark, root: str, samples: int = 10) -> Version:
    version = Dataset(root).version("v1")
    write(frame(spark, 0, samples), version.uri)
    assert validate_version(version.uri).ok
    publish(root, "v1")
    return version


def snapshot(version: Version) -> dict[str, bytes]:
    storage = version.storage
    return {name: storage.read_bytes(version.path(name)) for name in storage.list_sizes(version.uri)}


@pytest.mark.parametrize("where", ["local", "gs"])
def test_writes_into_a_published_version_are_refused(spark, tmp_path, where, request) -> None:
    root = request.getfixturevalue("bucket") + "/ds" if where == "gs" else str(tmp_path / "ds")
    version = published_root(spark, root)
    before = snapshot(version)
    for mode in ("append", "overwrite"):
        error = raised(lambda: write(frame(spark, 100, 5), version.uri, mode=mode))
        assert isinstance(error, VersionSealed) and "'v1'" in str(error)
    assert snapshot(version) == before
    assert not version.storage.list_dirs(version.staging_uri)
    assert spark.read.format("webdataset").load(root).count() == 10
    # a version sealed by publish but whose record is not there yet is refused too
    other = Dataset(root).version("v2")
    write(frame(spark, 0, 3), other.uri)
    other.storage.write_atomic(other.seal_uri, b"{}")
    assert isinstance(raised(lambda: write(frame(spark, 10, 3), other.uri, mode="append")), VersionSealed)


def test_build_and_reshard_jobs_refuse_a_published_version(spark, tmp_path, digits_source) -> None:
    from spark_webdataset.jobs.build import build, parser
    from spark_webdataset.jobs.reshard import parser as reshard_parser
    from spark_webdataset.jobs.reshard import reshard

    root = str(tmp_path / "ds")
    version = published_root(spark, root)
    before = snapshot(version)
    args = parser().parse_args(["--source", digits_source, "--output", root, "--version", "v1", "--key", "id"])
    with pytest.raises(VersionSealed):
        build(spark, args)
    args = reshard_parser().parse_args(["--input", root, "--output", root, "--version", "v1"])
    with pytest.raises(VersionSealed):
        reshard(spark, args)
    assert snapshot(version) == before


def test_a_crash_inside_the_commit_is_refused_by_readers_and_repaired_by_the_next_job(spark, tmp_path) -> None:
    target = str(tmp_path / "v")
    write(frame(spark, 0, 40, prefix="old"), target, maxSamplesPerShard=5)
    # The commit's process dies after the old manifest is gone and the new shards are renamed.
    raised_error = None
    try:
        with faults.installed({"commit:renamed": {"action": "exit"}}):
            write(frame(spark, 0, 12, prefix="new"), target, maxSamplesPerShard=5, commitLeaseSeconds=1)
    except Exception as error:  # noqa: BLE001 - Spark reports the dead Python worker its own way
        raised_error = error
    assert raised_error is not None
    assert not (Path(target) / "_manifest.json").exists()
    with pytest.raises(NotCommitted):
        resolve(target)
    assert isinstance(raised(lambda: spark.read.format("webdataset").load(target).count()), NotCommitted)
    time.sleep(1.5)  # the dead commit's lease runs out
    # The next job finishes the decided commit first, then appends.
    write(frame(spark, 100, 3, prefix="more"), target, mode="append")
    keys = sorted(row["__key__"] for row in spark.read.format("webdataset").load(target).select("__key__").collect())
    assert keys == sorted([f"new{i:05d}" for i in range(12)] + [f"more{i:05d}" for i in range(100, 103)])
    assert validate_version(target).ok


def test_a_reader_polling_an_overwrite_sees_old_new_or_not_committed(spark, tmp_path) -> None:
    target = str(tmp_path / "v")
    write(frame(spark, 0, 1000, prefix="old", partitions=2), target, maxSamplesPerShard=1)
    old = resolve(target)[0]
    assert len(old) == 1000
    seen: list[object] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            try:
                urls, manifest = resolve(target)
                seen.append(("set", tuple(urls), manifest.shards[0].first_key[:3] if manifest else None))
            except NotCommitted:
                seen.append("not committed")

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        with faults.installed({"commit:renamed": {"action": "sleep", "seconds": 0.5}}):
            write(frame(spark, 0, 1000, prefix="new", partitions=2), target, maxSamplesPerShard=1)
    finally:
        stop.set()
        poller.join()
    new = resolve(target)[0]

    def outcome(snapshot: object) -> str:
        if snapshot == "not committed":
            return "not committed"
        _, urls, prefix = snapshot  # type: ignore[misc]
        if urls == tuple(old) and prefix == "old":
            return "old"
        return "new" if urls == tuple(new) and prefix == "new" else "mixed"

    outcomes = {outcome(s) for s in seen}
    assert outcomes <= {"old", "new", "not committed"}, outcomes
    assert "not committed" in outcomes  # the pause holds the window open: the poller saw it


@pytest.mark.parametrize("where", ["local", "gs"])
def test_overlapping_appends_lose_nothing(spark, tmp_path, where, request) -> None:
    target = (request.getfixturevalue("bucket") + "/v") if where == "gs" else str(tmp_path / "v")
    write(frame(spark, 0, 10, prefix="base"), target)
    errors: list[BaseException] = []

    def append(prefix: str) -> None:
        try:
            # Spark looks Python data sources up in the thread's active session: set it in this thread.
            spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            write(frame(spark, 0, 20, prefix=prefix), target, mode="append", maxSamplesPerShard=7)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    jobs = [threading.Thread(target=append, args=(prefix,)) for prefix in ("one", "two")]
    with faults.installed({"commit:manifest-read": {"action": "sleep", "seconds": 2}}):  # the commits overlap
        for job in jobs:
            job.start()
        for job in jobs:
            job.join()
    assert errors == [], [str(e)[:3000] for e in errors]
    manifest = Version.at(target).read_manifest()
    assert manifest is not None and manifest.samples == 50
    assert [s.name for s in manifest.shards] == [f"shard-{i:06d}.tar" for i in range(len(manifest.shards))]
    keys = {row["__key__"] for row in spark.read.format("webdataset").load(target).select("__key__").collect()}
    assert keys == {f"{p}{i:05d}" for p in ("one", "two") for i in range(20)} | {f"base{i:05d}" for i in range(10)}
    assert validate_version(target).ok


def test_append_of_a_key_already_in_the_version_is_refused(spark, tmp_path) -> None:
    target = str(tmp_path / "v")
    write(frame(spark, 0, 30), target)
    before = snapshot(Version.at(target))
    error = raised(lambda: write(frame(spark, 25, 10), target, mode="append"))
    assert isinstance(error, DuplicateKey) and "'k00025'" in str(error)
    assert snapshot(Version.at(target)) == before
    error = raised(lambda: write(frame(spark, 100, 3).drop("txt"), target, mode="append"))
    assert isinstance(error, FieldMismatch)
    write(frame(spark, 30, 10), target, mode="append")
    assert spark.read.format("webdataset").load(target).count() == 40


def test_latest_follows_logical_dates(spark, tmp_path) -> None:
    from spark_webdataset.dataset.catalog import describe

    root = str(tmp_path / "ds")
    dataset = Dataset(root)
    for version, logical in (
        ("20261201T000000Z", None),
        ("backup", "2026-11-15T00:00:00Z"),
        ("20261203T000000Z", None),
    ):
        target = dataset.version(version)
        write(frame(spark, 0, 5, partitions=1), target.uri)
        assert validate_version(target.uri).ok
        args = ["publish", root, version] + (["--logical-date", logical] if logical else [])
        assert subprocess.run([sys.executable, "-m", "spark_webdataset.cli", *args]).returncode == 0
        assert dataset.read_latest() == ("20261201T000000Z" if version != "20261203T000000Z" else version)
    dates = {v["version"]: v["logical_date"] for v in describe(root)["versions"]}
    assert dates == {
        "backup": "2026-11-15T00:00:00Z",
        "20261201T000000Z": "2026-12-01T00:00:00Z",
        "20261203T000000Z": "2026-12-03T00:00:00Z",
    }


def test_root_read_checks_the_manifest_against_its_publish_record(spark, tmp_path) -> None:
    root = str(tmp_path / "ds")
    version = published_root(spark, root)
    data = Path(version.manifest_uri).read_bytes()
    Path(version.manifest_uri).write_bytes(
        data.replace(b'"sample_index"', b'"sample_index" ', 1)
    )  # same shards, other bytes
    assert isinstance(raised(lambda: spark.read.format("webdataset").load(root).count()), ManifestChanged)


# -- point 8: the smaller defects --------------------------------------------


def test_non_ascii_field_names_need_allow_pax(spark, tmp_path) -> None:
    df = spark.range(3).selectExpr("format_string('k%d', id) AS __key__", "id AS `zählung`")
    target = tmp_path / "v"
    assert isinstance(raised(lambda: write(df, str(target))), InvalidField)
    assert not target.exists()
    write(df, str(target), allowPax="true")
    assert spark.read.format("webdataset").load(str(target)).columns[-1] == "zählung"


@pytest.mark.parametrize("key", ["a//b", "a/b/", "a/./b", "./a", "a/../b"])
def test_keys_that_extract_to_another_path_are_refused(spark, tmp_path, key) -> None:
    df = spark.createDataFrame([(key, b"x")], "__key__ string, bin binary")
    target = tmp_path / "v"
    error = raised(lambda: write(df, str(target)))
    assert isinstance(error, InvalidKey) and repr(key) in str(error)
    assert not target.exists()  # a refused write leaves nothing: no _staging/, no mark


def test_out_of_range_mtime_and_bad_booleans_fail_on_the_driver(spark, tmp_path) -> None:
    target = tmp_path / "v"
    df = frame(spark, 0, 3)
    assert isinstance(raised(lambda: write(df, str(target), mtime=str(8**11))), BadOption)
    assert isinstance(raised(lambda: write(df, str(target), allowPax="maybe")), BadOption)
    assert not target.exists()
    write(df, str(target), allowPax="yes", mtime=str(8**11 - 1))
    reader = spark.read.format("webdataset")
    assert isinstance(raised(lambda: reader.option("skipBadShards", "maybe").load(str(target))), BadOption)
    assert reader.option("skipBadShards", "yes").load(str(target)).count() == 3  # the same parser as allowPax


def test_schema_inference_names_the_bad_shard_or_skips_it(spark, tmp_path) -> None:
    directory = tmp_path / "foreign"
    directory.mkdir()
    good = tmp_path / "good"
    write(frame(spark, 0, 6, partitions=1), str(good))
    (directory / "a.tar").write_bytes(b"not a tar at all" * 64)
    (directory / "b.tar").write_bytes((good / "shard-000000.tar").read_bytes())
    error = raised(lambda: spark.read.format("webdataset").load(str(directory)).schema)
    assert isinstance(error, TarFormatError) and "a.tar" in str(error)
    df = spark.read.format("webdataset").option("skipBadShards", "true").load(str(directory))
    assert df.columns == ["__key__", "__url__", "txt", "cls"] and df.count() == 6


def test_validation_checks_the_manifests_totals_and_counts_every_duplicate(spark, tmp_path) -> None:
    import json

    target = tmp_path / "v"
    write(frame(spark, 0, 40, partitions=1), str(target), maxSamplesPerShard=10)
    shards = sorted(target.glob("shard-*.tar"))
    data = shards[0].read_bytes()
    for other in shards[1:3]:  # shards 1 and 2 become copies of shard 0: 20 duplicate keys
        other.write_bytes(data)
    document = json.loads((target / "_manifest.json").read_text())
    document["samples"] += 1
    for index in (1, 2):
        document["shards"][index] = dict(document["shards"][0], name=document["shards"][index]["name"])
    document["bytes"] = sum(s["bytes"] for s in document["shards"])  # only the samples total is wrong
    (target / "_manifest.json").write_text(json.dumps(document))
    report = validate_version(str(target))
    messages = [e["error"] for e in report.errors]
    assert any("manifest's samples is 41" in m for m in messages)
    assert report.error_count == 1 + 20
    assert sum("key appears in shards" in m for m in messages) == 20
