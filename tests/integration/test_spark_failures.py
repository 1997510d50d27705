"""Task retries, failed jobs and bad input: nothing lost, nothing twice, nothing half-written visible."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from spark_webdataset import fault_points as faults
from spark_webdataset.errors import DuplicateKey, from_spark
from tests.support.helpers import (
    assert_version_consistent,
    failed_task_attempts,
    manifest,
    run_until_every_task_ended,
    shard_paths,
)

pytestmark = pytest.mark.slow


def keyed_frame(spark, count: int = 600, partitions: int = 3):
    return spark.range(0, count, numPartitions=partitions).selectExpr(
        "format_string('s%05d', id) AS __key__", "cast(repeat('x', 700) AS binary) AS bin", "id AS cls"
    )


def read_keys(directory) -> list[str]:
    import webdataset as wds

    return [s["__key__"] for s in wds.WebDataset([str(p) for p in shard_paths(directory)], shardshuffle=False)]


@pytest.mark.parametrize("action, partitions", [("raise", [0, 2]), ("exit", [1])])
def test_retried_task_gives_exactly_the_input(spark, tmp_path, action: str, partitions: list[int]) -> None:
    """local[2,2]: the first attempt fails (an exception, or a worker that dies), the retry succeeds."""
    target = tmp_path / "v"
    writer = keyed_frame(spark).write.format("webdataset").option("maxShardBytes", "64KiB").mode("overwrite")
    fault = {"task:batch-written": {"action": action, "partitions": partitions, "attempts": [0]}}
    with faults.installed(fault):
        # Spark's own count: the first attempt of each faulted partition failed, and was retried
        assert failed_task_attempts(spark, lambda: writer.save(str(target))) == len(partitions)
    assert_version_consistent(target, 64 * 1024)
    keys = read_keys(target)
    assert sorted(keys) == [f"s{i:05d}" for i in range(600)]
    # our mark, the manifest, the key run, the shards; dot-files are local storage's lock files
    listed = sorted(name for name in os.listdir(target) if not name.startswith("."))
    assert listed == ["_WEBDATASET", "_index", "_manifest.json"] + [p.name for p in shard_paths(target)]


def test_failed_job_leaves_no_manifest_and_next_run_cleans_staging(spark, tmp_path) -> None:
    target = tmp_path / "v"
    bad = keyed_frame(spark).selectExpr(
        "CASE WHEN __key__ = 's00500' THEN 'bad.key' ELSE __key__ END AS __key__", "bin", "cls"
    )
    with pytest.raises(Exception, match="invalid sample key 'bad.key'"):  # nothing is left once every task ended
        run_until_every_task_ended(
            spark,
            lambda: bad.write.format("webdataset").option("maxShardBytes", "64KiB").mode("overwrite").save(str(target)),
        )
    assert not (target / "_manifest.json").exists()
    assert not shard_paths(target)
    assert not list(target.rglob("*.tar"))
    # A driver killed between tasks and commit leaves staging that nothing swept;
    # we lay such a leftover by hand (the real kill is the pipeline's SIGKILL test).
    # Its files are old (we set their mtime back: the one fault here); a live job's
    # staging (fresh, with its lease) sits beside it and must survive.
    leftover = target / "_staging" / "deadjob" / "p00000-a0-t1"
    leftover.mkdir(parents=True)
    (leftover / "000000.tar").write_bytes(b"partial")
    (target / "_staging" / "deadjob" / "_lease.json").write_text("{}")
    long_ago = time.time() - 25 * 3600
    for path in [leftover / "000000.tar", leftover, leftover.parent / "_lease.json", leftover.parent]:
        os.utime(path, (long_ago, long_ago))
    live = target / "_staging" / "livejob"
    live.mkdir()
    (live / "_lease.json").write_text("{}")
    keyed_frame(spark).write.format("webdataset").option("maxShardBytes", "64KiB").mode("overwrite").save(str(target))
    assert not (target / "_staging" / "deadjob").exists()
    assert (live / "_lease.json").exists()
    shutil.rmtree(live)
    (target / "_staging").rmdir()
    assert_version_consistent(target)


def _write(frame, target: Path, **options) -> None:
    writer = frame.write.format("webdataset").mode("overwrite")
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save(str(target))


BAD_INPUTS = {
    "null key": (
        "CASE WHEN id = 7 THEN NULL ELSE format_string('k%03d', id) END AS __key__, id AS cls",
        {},
        "the key is null",
    ),
    "empty key": (
        "CASE WHEN id = 7 THEN '' ELSE format_string('k%03d', id) END AS __key__, id AS cls",
        {},
        "the key is empty",
    ),
    "dot in key": ("format_string('dir/k%03d.x', id) AS __key__, id AS cls", {}, ".x' holds a '.'"),
    "duplicate key, one partition": (
        "format_string('k%03d', id % 50) AS __key__, id AS cls",
        {},
        "duplicate sample key 'k0",
    ),
    "upper-case field": (
        "format_string('k%03d', id) AS __key__, id AS Cls",
        {},
        "field names must be lower case ('Cls'",
    ),
    "colliding fields": ("format_string('k%03d', id) AS __key__, id AS cls, id + 1 AS cls", {}, "'cls' appears twice"),
    "reserved column": (
        "format_string('k%03d', id) AS __key__, id AS cls, 'u' AS __url__",
        {},
        "'__url__' is a reserved column",
    ),
    "no key column": ("format_string('k%03d', id) AS name, id AS cls", {}, "no '__key__' column"),
    "unencodable type": (
        "format_string('k%03d', id) AS __key__, INTERVAL '1' DAY AS gap",
        {},
        "column 'gap' has type interval day",
    ),
    "long member name": (
        "concat(repeat('k', 97), id) AS __key__, id AS cls",
        {},
        "bytes; portable USTAR names hold at most 100",
    ),
    "non-ASCII name": ("concat('ключ', id) AS __key__, id AS cls", {}, "is not ASCII"),
    "all fields null": (
        "format_string('k%03d', id) AS __key__, CASE WHEN id = 3 THEN NULL ELSE id END AS cls",
        {},
        "'k003': every field is null",
    ),
    "tiny shard cap": (
        "format_string('k%03d', id) AS __key__, id AS cls",
        {"maxShardBytes": "1000"},
        "maxShardBytes=1000 is smaller",
    ),
    "bad size": (
        "format_string('k%03d', id) AS __key__, id AS cls",
        {"maxShardBytes": "lots"},
        "maxShardBytes='lots' is not a byte size",
    ),
    "unknown option": (
        "format_string('k%03d', id) AS __key__, id AS cls",
        {"maxShardSize": "1GiB"},
        "unknown option(s) maxshardsize",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_named_and_nothing_is_written(spark, tmp_path, case: str) -> None:
    select, options, message = BAD_INPUTS[case]
    frame = spark.range(0, 100, numPartitions=2).selectExpr(*[part.strip() for part in _split(select)])
    target = tmp_path / "v"
    with pytest.raises(Exception) as error:
        _write(frame, target, **options)
    assert message in str(error.value)
    assert not (target / "_manifest.json").exists()
    assert not list(target.rglob("*.tar")) if target.exists() else True


def test_duplicate_key_across_partitions_never_reaches_a_manifest(spark, tmp_path) -> None:
    frame = spark.range(0, 100, numPartitions=2).selectExpr(
        "format_string('k%03d', CASE WHEN id = 99 THEN 0 ELSE id END) AS __key__", "id AS cls"
    )
    target = tmp_path / "v"
    with pytest.raises(Exception) as failure:
        _write(frame, target)
    error = from_spark(failure.value)
    assert isinstance(error, DuplicateKey) and "'k000'" in str(error)
    assert "partition 0" in str(error) and "partition 1" in str(error)
    assert not (target / "_manifest.json").exists()
    assert not list(target.rglob("*.tar"))


def test_long_and_non_ascii_names_with_pax(spark, tmp_path) -> None:
    frame = spark.range(0, 5).selectExpr("concat(repeat('k', 97), 'ключ', id) AS __key__", "id AS cls")
    _write(frame, tmp_path / "v", allowPax="true")
    keys = read_keys(tmp_path / "v")
    assert sorted(keys) == sorted("k" * 97 + f"ключ{i}" for i in range(5))
    assert manifest(tmp_path / "v")["options"]["allowPax"] is True


def _split(select: str) -> list[str]:
    """Split a SELECT list at top-level commas."""
    parts, depth, current = [], 0, ""
    for char in select:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return parts + [current]
