"""The sharding job: sizing, reproducible bytes, published versions left alone, spark-submit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_webdataset.errors import VersionSealed
from spark_webdataset.jobs.build import build, parser
from tests.support.helpers import assert_version_consistent, manifest, shard_paths, spark_submit
from tests.support.tars import tar_keys, tar_samples

DIGITS_ARGS = [
    "--key",
    "format_string('%05d', id)",
    "--field",
    "png=image",
    "--field",
    "cls=label",
    "--field",
    "json=meta",
]


def job_args(source: str, root: Path, version: str, *extra: str):
    return parser().parse_args(["--source", source, "--output", str(root), "--version", version, *DIGITS_ARGS, *extra])


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


@pytest.mark.slow
def test_spark_submit_end_to_end(digits_source, tmp_path) -> None:
    summary_path = tmp_path / "summary.json"
    common = ["--source", digits_source, "--output", str(tmp_path), "--field", "png=image"]
    done = spark_submit(
        [*common, "--version", "v", "--key", "format_string('%05d', id)", "--summary-json", str(summary_path)]
    )
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


def build_args(*argv: str):
    from spark_webdataset.jobs.build import parser

    return parser().parse_args(list(argv))


@pytest.mark.slow
def test_build_job_append_adds_a_second_source(spark, tmp_path) -> None:
    from spark_webdataset.jobs.build import build

    for name, (start, end) in {"a": (0, 60), "b": (60, 100)}.items():
        spark.range(start, end).selectExpr("id", "CAST(id % 10 AS INT) AS label").write.parquet(str(tmp_path / name))
    root = tmp_path / "root"
    common = ["--output", str(root), "--version", "v", "--key", "format_string('%04d', id)", "--field", "cls=label",
              "--max-samples-per-shard", "25", "--order", "key"]  # fmt: skip
    first = build(spark, build_args("--source", str(tmp_path / "a"), *common))
    target = root / "versions" / "v"
    earlier = {p.name: p.read_bytes() for p in shard_paths(target)}
    assert first["samples"] == 60 and len(earlier) >= 3
    second = build(spark, build_args("--source", str(tmp_path / "b"), *common, "--mode", "append"))
    assert second["samples"] == 100
    document = assert_version_consistent(target)  # names contiguous, manifest agrees with the files
    assert len(document["shards"]) > len(earlier)
    assert {name: (target / name).read_bytes() for name in earlier} == earlier  # earlier shards untouched
    assert sorted(tar_keys(shard_paths(target))) == [f"{i:04d}" for i in range(100)]
    new = [target / s["name"] for s in document["shards"][len(earlier) :]]
    assert sorted(tar_keys(new)) == [f"{i:04d}" for i in range(60, 100)]


@pytest.mark.slow
def test_build_job_main_exit_2_for_a_missing_source(spark, tmp_path, capsys) -> None:
    from spark_webdataset.jobs.build import main

    missing = tmp_path / "no-such-source"
    code = main(["--source", str(missing), "--output", str(tmp_path / "out"), "--version", "v", "--key", "id"])
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]  # bad input: Airflow need not retry
    errors = [line for line in err.splitlines() if line.startswith("build_webdataset: error:")]
    assert len(errors) == 1 and str(missing) in errors[0], err[-3000:]
    assert not (tmp_path / "out" / "versions" / "v" / "_manifest.json").exists()


# -- --source-table and --seed ---------------------------------------------------------------------


@pytest.mark.slow
def test_build_job_source_table_and_seed(spark, tmp_path) -> None:
    from spark_webdataset.jobs.build import build

    spark.range(50).selectExpr("id", "CAST(id % 10 AS INT) AS label", "concat('t', id) AS txt").createOrReplaceTempView(
        "claims_seed_source"
    )
    root = tmp_path / "root"

    def run(version: str, seed: int) -> Path:
        build(spark, build_args("--source-table", "claims_seed_source", "--output", str(root), "--version", version,
                                "--key", "format_string('%03d', id)", "--field", "cls=label", "--field", "txt=txt",
                                "--seed", str(seed)))  # fmt: skip
        return root / "versions" / version

    one, again, two = run("s1", 1), run("s1-again", 1), run("s2", 2)
    samples = tar_samples(shard_paths(one))
    assert sorted(samples) == [f"{i:03d}" for i in range(50)]  # the table's rows...
    assert samples["007"] == {"cls": b"7", "txt": b"t7"}  # ...and its values
    assert [p.read_bytes() for p in shard_paths(one)] == [p.read_bytes() for p in shard_paths(again)]
    first, second = manifest(one), manifest(again)
    first.pop("run"), second.pop("run")
    assert first == second
    assert sorted(tar_keys(shard_paths(two))) == sorted(tar_keys(shard_paths(one)))  # same keys
    assert tar_keys(shard_paths(two)) != tar_keys(shard_paths(one))  # another order
    assert tar_samples(shard_paths(two)) == samples


def test_a_days_delete_lands_on_its_upsert_without_a_mode(spark, tmp_path) -> None:
    """The build job's delete defaults to --mode append: run after the day's upsert into the same
    version, it removes its keys from the upsert's result instead of replacing it."""
    from spark_webdataset.dataset.layout import Dataset
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.dataset.validate import validate_version

    spark.range(0, 40).selectExpr("id", "CAST(id % 10 AS INT) AS label").write.parquet(str(tmp_path / "day0"))
    spark.range(35, 45).selectExpr("id", "CAST(7 AS INT) AS label").write.parquet(str(tmp_path / "upsert"))
    spark.range(0, 3).selectExpr("id").write.parquet(str(tmp_path / "delete"))
    root = str(tmp_path / "root")
    key = ["--key", "format_string('%04d', id)"]
    build(
        spark,
        build_args(
            "--source", str(tmp_path / "day0"), "--output", root, "--version", "d0", *key, "--field", "cls=label"
        ),
    )
    assert validate_version(f"{root}/versions/d0").ok
    publish(root, "d0")
    day = ["--output", root, "--version", "d1", "--parent", "d0", *key]
    build(spark, build_args("--source", str(tmp_path / "upsert"), *day, "--field", "cls=label", "--change", "upsert"))
    build(spark, build_args("--source", str(tmp_path / "delete"), *day, "--change", "delete"))
    samples = tar_samples(
        Dataset(root).version("d1").entry_uri(entry) for entry in Dataset(root).version("d1").read_manifest().shards
    )
    assert sorted(samples) == [f"{i:04d}" for i in range(3, 45)]  # 0-2 deleted, 40-44 added by the upsert
    assert samples["0036"]["cls"] == b"7" and samples["0005"]["cls"] == b"5"  # the upsert kept
