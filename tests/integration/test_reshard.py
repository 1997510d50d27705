"""jobs/reshard.py: same samples, same member bytes, new shards: order kept, byte cap held, exact multiples."""

from __future__ import annotations

import pytest

from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.errors import (
    InputError,
)
from spark_webdataset.jobs.reshard import parser, reshard
from tests.support.helpers import assert_version_consistent, shard_paths, text_v1
from tests.support.tars import tar_keys, tar_samples

pytestmark = pytest.mark.slow
ROWS = 300
CAP = 64 * 1024
BIG_KEY = "k0123"  # its payload alone (80 KiB) is over CAP


@pytest.fixture(scope="module")
def source_version(spark, tmp_path_factory):
    """Samples of varied size (about 100 B to 8 KiB, one of 80 KiB) in a known source order."""
    target = tmp_path_factory.mktemp("src") / "versions" / "v1"
    big = int(BIG_KEY[1:])
    payload_length = f"CASE WHEN (id * 37) % 300 = {big} THEN 80 * 1024 ELSE (id * 7919) % 8000 + 100 END"
    (
        spark.range(0, ROWS, numPartitions=3)
        .selectExpr(
            # keys out of step with the row order: sorting by key or hash would not give the source order back
            "format_string('k%04d', (id * 37) % 300) AS __key__",
            f"concat(cast(format_string('s%04d:', id) AS binary), unhex(repeat('5a', {payload_length}))) AS bin",
            "id % 10 AS cls",
        )
        .write.format("webdataset")
        .option("maxShardBytes", "256KiB")
        .mode("overwrite")
        .save(str(target))
    )
    return target


def samples(directory) -> list[tuple[str, bytes, bytes]]:
    """Every sample in shard order, then tar order within a shard."""
    import webdataset as wds

    urls = sorted(str(p) for p in directory.glob("shard-*.tar"))
    return [(s["__key__"], s["bin"], s["cls"]) for s in wds.WebDataset(urls, shardshuffle=False)]


def run(spark, source, tmp_path, *flags: str) -> tuple[dict, dict]:
    args = parser().parse_args(["--input", str(source), "--output", str(tmp_path), "--version", "r", *flags])
    summary = reshard(spark, args)
    return summary, assert_version_consistent(tmp_path / "versions" / "r")


def test_the_source_is_uneven_and_out_of_key_order(source_version) -> None:
    source = samples(source_version)
    sizes = {len(payload) for _, payload, _ in source}
    assert len(source) == ROWS and len(sizes) > 100 and max(sizes) > CAP
    keys = [key for key, _, _ in source]
    assert keys != sorted(keys)


def test_reshard_with_a_byte_cap_keeps_the_source_order(spark, source_version, tmp_path) -> None:
    _, document = run(spark, source_version, tmp_path, "--max-shard-bytes", "64KiB", "--order", "source")
    out = tmp_path / "versions" / "r"
    assert samples(out) == samples(source_version)  # ordered: every key at its place, bytes unchanged
    shards = document["shards"]
    assert len(shards) >= 20
    for shard in shards:
        size = (out / shard["name"]).stat().st_size
        assert size == shard["bytes"]
        if shard["first_key"] == BIG_KEY:
            assert shard["samples"] == 1 and size > CAP  # a sample over the cap gets a shard of its own
        else:
            assert size <= CAP, f"{shard['name']} holds {size} bytes over {CAP}"


def test_reshard_with_a_sample_cap_keeps_the_source_order(spark, source_version, tmp_path) -> None:
    _, document = run(spark, source_version, tmp_path, "--max-samples-per-shard", "40")
    assert samples(tmp_path / "versions" / "r") == samples(source_version)
    counts = [s["samples"] for s in document["shards"]]
    assert max(counts) <= 40 and len(counts) >= 8


@pytest.mark.parametrize("multiple, order", [(4, "hash"), (3, "source")])
def test_reshard_to_a_multiple_of_n_gives_equal_shards(spark, source_version, tmp_path, multiple, order) -> None:
    summary, document = run(
        spark, source_version, tmp_path, "--shard-multiple", str(multiple), "--max-shard-bytes", "256KiB",
        "--order", order, "--seed", "7",
    )  # fmt: skip
    counts = [s["samples"] for s in document["shards"]]
    assert summary["shards"] == len(counts) and len(counts) % multiple == 0 and len(counts) >= 2 * multiple
    assert max(counts) - min(counts) <= 1 and sum(counts) == ROWS
    written, source = samples(tmp_path / "versions" / "r"), samples(source_version)
    if order == "source":
        assert written == source
    else:
        assert sorted(written) == sorted(source) and written != source  # same samples, mixed


# -- reshard: pattern input, too few rows, exit codes ------------------------------------------


def reshard_args(*argv: str):
    from spark_webdataset.jobs.reshard import parser

    return parser().parse_args(list(argv))


@pytest.mark.slow
def test_reshard_reads_a_shard_pattern(spark, text_root, tmp_path) -> None:
    from spark_webdataset.jobs.reshard import reshard

    pattern = str(text_v1(text_root) / "shard-{000000..000001}.tar")
    summary = reshard(spark, reshard_args("--input", pattern, "--output", str(tmp_path), "--version", "r",
                                          "--max-samples-per-shard", "30"))  # fmt: skip
    out = tmp_path / "versions" / "r"
    document = assert_version_consistent(out)
    assert summary["samples"] == document["samples"] == 80  # the two matched shards, not the third
    assert all(s["samples"] <= 30 for s in document["shards"])
    source = shard_paths(text_v1(text_root))[:2]
    assert tar_samples(shard_paths(out)) == tar_samples(source)  # member bytes text_root_copy as they are
    assert tar_keys(shard_paths(out)) == tar_keys(source)  # --order source keeps the order


@pytest.mark.slow
def test_reshard_refuses_more_shards_than_rows(spark, text_root, tmp_path) -> None:
    from spark_webdataset.jobs.reshard import reshard

    args = reshard_args(
        "--input", str(text_v1(text_root)), "--output", str(tmp_path), "--version", "r", "--shard-multiple", "200"
    )
    with pytest.raises(InputError, match="120 samples cannot fill 200 shards"):
        reshard(spark, args)
    assert Dataset(str(tmp_path)).version("r").read_manifest() is None


@pytest.mark.slow
def test_reshard_main_exit_0_on_success(spark, text_root, tmp_path, capsys) -> None:
    from spark_webdataset.jobs.reshard import main

    assert main(["--input", str(text_v1(text_root)), "--output", str(tmp_path / "out"), "--version", "r",
                 "--max-samples-per-shard", "60"]) == 0  # fmt: skip
    document = assert_version_consistent(tmp_path / "out" / "versions" / "r")
    assert f"wrote {len(document['shards'])} shards, 120 samples" in capsys.readouterr().out
    assert all(s["samples"] <= 60 for s in document["shards"])
    assert tar_samples(shard_paths(tmp_path / "out" / "versions" / "r")) == tar_samples(shard_paths(text_v1(text_root)))
