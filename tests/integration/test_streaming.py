"""`writeStream.format("webdataset")`: each micro-batch committed exactly once.

The kill test runs the query in a driver process of its own and SIGKILLs
it twice: in the middle of a micro-batch (tasks paused at the writer's
fault point task:batch-written) and between a batch's commit and Spark's
checkpoint of it (paused at stream:committed); a third driver (this session's)
restarts from the checkpoint. Every input row must then be in the
version exactly once and `spark-webdataset validate` must pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_webdataset import fault_points as faults
from spark_webdataset.errors import BadOption, DuplicateKey, InvalidKey, from_spark
from tests.support import SUPPORT
from tests.support.helpers import assert_version_consistent, manifest
from tests.support.streaming_driver import SCHEMA, stream

pytestmark = pytest.mark.slow


def _add_file(source: Path, name: str, keys: list[str | None]) -> None:
    """Written aside and renamed in: the file source never sees half a file."""
    temp = source.parent / f".{name}.tmp"
    with open(temp, "w") as out:
        for key in keys:
            number = int(key) if key and key.isdigit() else 0
            out.write(json.dumps({"__key__": key, "txt": f"row {key}", "cls": number % 7}) + "\n")
    os.replace(temp, source / name)


def _keys(start: int, count: int) -> list[str]:
    return [f"{i:06d}" for i in range(start, start + count)]


def _run(spark, source: Path, version: Path, checkpoint: Path, **options: str) -> None:
    query = stream(spark, str(source), str(version), str(checkpoint), options, available_now=True)
    query.awaitTermination()


def _read_keys(spark, version: Path) -> list[str]:
    return [row[0] for row in spark.read.format("webdataset").load(str(version)).select("__key__").collect()]


def _streams(version: Path) -> dict:
    return manifest(version)["run"].get("streams", {})


def test_micro_batches_append_contiguous_shards_and_a_replayed_batch_commits_nothing(spark, tmp_path) -> None:
    source, version, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    source.mkdir()
    _add_file(source, "0.json", _keys(0, 50))
    _add_file(source, "1.json", _keys(50, 30))
    _run(spark, source, version, checkpoint, maxSamplesPerShard="20")
    assert _streams(version) == {str(checkpoint): 1}  # one file a batch: batches 0 and 1
    _add_file(source, "2.json", _keys(80, 25))
    _run(spark, source, version, checkpoint, maxSamplesPerShard="20")
    committed = manifest(version)
    assert committed["run"]["streams"] == {str(checkpoint): 2}
    assert [s["name"] for s in committed["shards"]] == [f"shard-{i:06d}.tar" for i in range(len(committed["shards"]))]
    assert sorted(_read_keys(spark, version)) == _keys(0, 105)
    assert_version_consistent(version, live_stream=True)

    # Spark replays a batch whose commit it did not checkpoint: drop the record of batch 2
    for record in ("2", ".2.crc"):  # the commit log's entry and Hadoop's checksum of it
        (checkpoint / "commits" / record).unlink()
    before = {p.name: p.read_bytes() for p in version.glob("shard-*.tar")}
    _run(spark, source, version, checkpoint, maxSamplesPerShard="20")
    assert (checkpoint / "commits" / "2").exists()  # Spark ran batch 2 again ...
    assert manifest(version)["shards"] == committed["shards"]  # ... and it committed nothing
    assert {p.name: p.read_bytes() for p in version.glob("shard-*.tar")} == before
    assert sorted(_read_keys(spark, version)) == _keys(0, 105)


def _batch_error(spark, rows_file: Path, tmp_path: Path) -> BaseException:
    """What a batch write of the same rows raises."""
    with pytest.raises(Exception) as batch:
        spark.read.schema(SCHEMA).json(str(rows_file)).write.format("webdataset").mode("append").save(
            str(tmp_path / "batch")
        )
    return batch.value


def test_bad_input_fails_the_query_like_a_batch_write_and_commits_nothing_of_its_batch(spark, tmp_path) -> None:
    source, version, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    source.mkdir()
    _add_file(source, "0.json", _keys(0, 10))
    _run(spark, source, version, checkpoint)
    committed = manifest(version)

    # a null key: the task refuses it with the batch writer's message
    _add_file(source, "1.json", ["000010", None, "000012"])
    batch_error = from_spark(_batch_error(spark, source / "1.json", tmp_path))
    assert isinstance(batch_error, InvalidKey), batch_error
    with pytest.raises(Exception) as streamed:
        _run(spark, source, version, checkpoint)
    stream_error = from_spark(streamed.value)
    assert type(stream_error) is type(batch_error) and str(stream_error) == str(batch_error), stream_error
    assert manifest(version) == committed
    assert not list((version / "_staging").rglob("*.tar"))

    # a key an earlier batch committed: the driver's commit refuses the batch (another query
    # appending to the same version, so the null-key batch is not replayed)
    other = tmp_path / "in2"
    other.mkdir()
    _add_file(other, "0.json", ["000100", "000003"])
    with pytest.raises(Exception) as duplicate:
        _run(spark, other, version, tmp_path / "checkpoint2")
    assert isinstance(from_spark(duplicate.value), DuplicateKey)
    assert "duplicate sample key '000003'" in str(from_spark(duplicate.value))
    assert manifest(version)["shards"] == committed["shards"]
    assert sorted(_read_keys(spark, version)) == _keys(0, 10)


def test_complete_mode_and_a_missing_checkpoint_are_refused_with_the_reason(spark, tmp_path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    _add_file(source, "0.json", _keys(0, 5))
    counts = (
        spark.readStream.schema(SCHEMA)
        .json(str(source))
        .groupBy("cls")
        .count()
        .selectExpr("cast(cls as string) as __key__", "cast(count as string) as count")
    )
    with pytest.raises(Exception) as complete:
        (
            counts.writeStream.format("webdataset")
            .outputMode("complete")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start(str(tmp_path / "out"))
            .awaitTermination()
        )
    assert isinstance(from_spark(complete.value), BadOption), complete.value
    assert "webdataset streams append" in str(from_spark(complete.value))
    assert not (tmp_path / "out" / "_manifest.json").exists()

    # the session-wide checkpoint root does not reach the sink: it needs the query's own option
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "checkpoints"))
    try:
        with pytest.raises(Exception) as missing:
            (
                spark.readStream.schema(SCHEMA)
                .json(str(source))
                .writeStream.format("webdataset")
                .trigger(availableNow=True)
                .start(str(tmp_path / "out"))
                .awaitTermination()
            )
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert isinstance(from_spark(missing.value), BadOption), missing.value
    assert "needs option checkpointLocation" in str(from_spark(missing.value))

    with pytest.raises(Exception) as upsert:  # a stream appends: upserts are batch writes
        (
            spark.readStream.schema(SCHEMA)
            .json(str(source))
            .writeStream.format("webdataset")
            .option("checkpointLocation", str(tmp_path / "ck2"))
            .option("parent", "LATEST")
            .option("change", "upsert")
            .trigger(availableNow=True)
            .start(str(tmp_path / "out"))
            .awaitTermination()
        )
    assert isinstance(from_spark(upsert.value), BadOption) and "a webdataset stream appends" in str(upsert.value)


def _start_driver(source: Path, version: Path, checkpoint: Path, log: Path, **options: str) -> subprocess.Popen:
    driver = SUPPORT / "streaming_driver.py"
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, str(driver), str(source), str(version), str(checkpoint), json.dumps(options)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _kill_when(process: subprocess.Popen, ready, log: Path, seconds: float = 180) -> None:
    """SIGKILL the driver's whole process group (JVM and Python workers) once `ready()`."""
    deadline = time.monotonic() + seconds
    while not ready():
        if process.poll() is not None:
            pytest.fail(f"the streaming driver exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            pytest.fail(f"the streaming driver did not get there in {seconds} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def test_exactly_once_after_the_driver_is_killed_mid_batch_and_between_commit_and_checkpoint(spark, tmp_path) -> None:
    from spark_webdataset.cli import main as cli

    source, version, checkpoint = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoint"
    log = tmp_path / "driver.log"
    source.mkdir()
    for number in range(3):
        _add_file(source, f"{number}.json", _keys(100 * number, 40 + number))

    # 1. killed in the middle of batch 0: its tasks staged part of a shard and wait
    with faults.installed({"task:batch-written": {"action": "sleep", "seconds": 600, "attempts": [0]}}):
        driver = _start_driver(source, version, checkpoint, log)
        _kill_when(driver, lambda: any((version / "_staging").rglob("*.tar")), log)
    assert not (version / "_manifest.json").exists()

    # 2. killed after batch 0's commit, before Spark checkpointed it
    with faults.installed({"stream:committed": {"action": "sleep", "seconds": 600}}):
        driver = _start_driver(source, version, checkpoint, log)
        committed = lambda: (version / "_manifest.json").exists() and _streams(version) == {str(checkpoint): 0}  # noqa: E731
        _kill_when(driver, committed, log)
    assert not (checkpoint / "commits" / "0").exists()
    assert manifest(version)["run"]["commits"] == 1

    # 3. restarted from the checkpoint: batch 0 is replayed (and dropped), 1 and 2 are committed
    _run(spark, source, version, checkpoint)
    assert _streams(version) == {str(checkpoint): 2}
    assert manifest(version)["run"]["commits"] == 3
    expected = sorted(_keys(0, 40) + _keys(100, 41) + _keys(200, 42))
    assert sorted(_read_keys(spark, version)) == expected  # every row, each once
    assert assert_version_consistent(version, live_stream=True)["samples"] == len(expected)
    assert cli(["validate", str(version), "--quiet", "--workers", "1"]) == 0


def test_a_stream_to_gcs_commits_its_batches_once(spark, bucket, tmp_path) -> None:
    """The same commit on gs:// (compare-and-swap by generation, server crc32c checked): two
    micro-batches, then a run with nothing new commits nothing."""
    from spark_webdataset.dataset.layout import Version

    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    version = f"{bucket}/stream/versions/v"
    source.mkdir()
    _add_file(source, "0.json", _keys(0, 30))
    _add_file(source, "1.json", _keys(30, 20))
    for _ in range(2):
        query = stream(spark, str(source), version, str(checkpoint), {"maxSamplesPerShard": "25"}, available_now=True)
        query.awaitTermination()
        committed = Version.at(version).read_manifest()
        assert committed is not None and committed.run["streams"] == {str(checkpoint): 1}
        assert committed.run["commits"] == 2 and committed.samples == 50
    keys = [row[0] for row in spark.read.format("webdataset").load(version).select("__key__").collect()]
    assert sorted(keys) == _keys(0, 50)
