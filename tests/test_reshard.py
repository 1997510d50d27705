"""jobs/reshard.py: same samples, same member bytes, new shards."""

from __future__ import annotations

import pytest

from helpers import assert_version_consistent
from spark_webdataset.reshard_job import parser, reshard

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def source_version(spark, digits_source, tmp_path_factory):
    target = tmp_path_factory.mktemp("src") / "versions" / "v1"
    spark.read.parquet(digits_source).selectExpr(
        "format_string('%05d', id) AS __key__", "image AS png", "label AS cls"
    ).write.format("webdataset").option("maxShardBytes", "1MiB").mode("overwrite").save(str(target))
    return target


def samples(directory) -> dict:
    import webdataset as wds

    urls = sorted(str(p) for p in directory.glob("shard-*.tar"))
    return {s["__key__"]: (s["png"], s["cls"]) for s in wds.WebDataset(urls, shardshuffle=False)}


def test_reshard_to_a_multiple_of_n_keeps_every_sample(spark, source_version, tmp_path) -> None:
    args = parser().parse_args(
        ["--input", str(source_version), "--output", str(tmp_path), "--version", "r", "--shard-multiple", "4",
         "--max-shard-bytes", "512KiB", "--order", "hash", "--seed", "7"]
    )  # fmt: skip
    summary = reshard(spark, args)
    out = tmp_path / "versions" / "r"
    document = assert_version_consistent(out)
    assert summary["shards"] % 4 == 0 and summary["shards"] >= 8
    counts = [s["samples"] for s in document["shards"]]
    assert max(counts) - min(counts) <= 1
    assert samples(out) == samples(source_version)


def test_reshard_with_new_caps_keeps_order(spark, source_version, tmp_path) -> None:
    args = parser().parse_args(
        ["--input", str(source_version), "--output", str(tmp_path), "--version", "r", "--max-samples-per-shard", "500"]
    )
    reshard(spark, args)
    out = tmp_path / "versions" / "r"
    document = assert_version_consistent(out)
    assert all(s["samples"] <= 500 for s in document["shards"])
    assert samples(out) == samples(source_version)
