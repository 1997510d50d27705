"""The sharding job: sizing, reproducible bytes, published versions left alone, spark-submit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import assert_version_consistent, manifest, shard_paths
from spark_webdataset.jobs.build import build, parser, plan_partitions
from spark_webdataset.errors import VersionSealed

REPO = Path(__file__).resolve().parents[1]
DIGITS_ARGS = ["--key", "format_string('%05d', id)", "--field", "png=image", "--field", "cls=label", "--field", "json=meta"]


def job_args(source: str, root: Path, version: str, *extra: str):
    return parser().parse_args(
        ["--source", source, "--output", str(root), "--version", version, *DIGITS_ARGS, *extra]
    )


def test_partition_plan_fills_shards() -> None:
    assert plan_partitions(1000, 10_000, 3 * 1024**3, None) == 1
    assert plan_partitions(10, 95 * 2**20, 10 * 2**20, None) == 11
    assert plan_partitions(10_000, 1000, 2**30, 100) == 112


@pytest.mark.slow
def test_two_runs_give_byte_identical_shards(spark, digits_source, tmp_path) -> None:
    root = tmp_path / "root"
    first = build(spark, job_args(digits_source, root, "a", "--max-shard-bytes", "512KiB"))
    second = build(spark, job_args(digits_source, root, "b", "--max-shard-bytes", "512KiB"))
    a, b = root / "versions" / "a", root / "versions" / "b"
    assert first["samples"] == second["samples"] == 1797
    assert [p.read_bytes() for p in shard_paths(a)] == [p.read_bytes() for p in shard_paths(b)]
    content_a, content_b = manifest(a), manifest(b)
    assert content_a.pop("run") != content_b.pop("run")  # job ids differ...
    assert content_a == content_b  # ...everything else is the same bytes
    assert_version_consistent(a, 512 * 1024)


@pytest.mark.slow
def test_many_small_source_files_do_not_make_many_small_shards(spark, digits_source, tmp_path) -> None:
    scattered = tmp_path / "scattered"
    spark.read.parquet(digits_source).repartition(60).write.parquet(str(scattered))
    assert len(list(scattered.glob("*.parquet"))) == 60
    summary = build(spark, job_args(str(scattered), tmp_path / "root", "v", "--max-shard-bytes", "2MiB"))
    document = assert_version_consistent(tmp_path / "root" / "versions" / "v", 2 * 2**20)
    assert summary["shards"] == len(document["shards"]) <= 4
    assert summary["bytes"] / summary["shards"] > 2**20  # shards more than half full


@pytest.mark.slow
@pytest.mark.parametrize("order", ["key", "source"])
def test_other_orders(spark, digits_source, tmp_path, order: str) -> None:
    build(spark, job_args(digits_source, tmp_path, "v", "--order", order, "--max-shard-bytes", "1MiB"))
    document = assert_version_consistent(tmp_path / "versions" / "v", 2**20)
    if order == "key":
        bounds = [(s["first_key"], s["last_key"]) for s in document["shards"]]
        assert all(a[1] < b[0] for a, b in zip(bounds, bounds[1:]))
    assert document["samples"] == 1797


@pytest.mark.slow
def test_published_version_is_refused(spark, digits_source, tmp_path) -> None:
    (tmp_path / "_published").mkdir()
    (tmp_path / "_published" / "v.json").write_text("{}")
    with pytest.raises(VersionSealed):
        build(spark, job_args(digits_source, tmp_path, "v"))
    assert not (tmp_path / "versions").exists()


def spark_submit(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    spark_submit = Path(sys.executable).parent / "spark-submit"
    return subprocess.run(
        [str(spark_submit), "--master", "local[2]", str(REPO / "jobs" / "build_webdataset.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.slow
def test_spark_submit_end_to_end(digits_source, tmp_path) -> None:
    summary_path = tmp_path / "summary.json"
    common = ["--source", digits_source, "--output", str(tmp_path), "--field", "png=image"]
    done = spark_submit(*common, "--version", "v", "--key", "format_string('%05d', id)", "--summary-json", str(summary_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrote 1 shards, 1797 samples" in done.stdout
    assert json.loads(summary_path.read_text())["samples"] == 1797


@pytest.mark.slow
def test_bad_key_exits_2_with_the_key_named(spark, digits_source, tmp_path, capsys) -> None:
    """main() in this process's session (it leaves a session it did not start running)."""
    from spark_webdataset.jobs.build import main

    argv = ["--source", digits_source, "--output", str(tmp_path), "--field", "png=image", "--version", "bad",
            "--key", "format_string('%05d.x', id)"]  # fmt: skip
    assert main(argv) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("build_webdataset: error:")]
    assert len(errors) == 1 and "invalid sample key '" in errors[0] and ".x' holds a '.'" in errors[0], errors
    assert not (tmp_path / "versions" / "bad" / "_manifest.json").exists()
    assert spark.range(1).count() == 1  # the caller's session is still up
