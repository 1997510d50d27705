"""The reader's per-shard check: a shard rewritten (same name, other bytes) after the query listed it.

The manifest read when the DataFrame was planned lists each shard's sample
count and key range; a shard that no longer holds them fails the read with
ManifestChanged instead of returning rows of another version.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_webdataset.errors import ManifestChanged, from_spark
from spark_webdataset.format import ustar
from tests.support.tars import member


def tar_of(keys: list[str]) -> bytes:
    return b"".join(member(f"{key}.txt", key.encode()) for key in keys) + ustar.END_OF_ARCHIVE


@pytest.mark.parametrize(
    "rewritten",
    [["k000", "k001"], ["k100", "k101", "k102", "k103", "k104"]],
    ids=["fewer samples", "same count, other keys"],
)
def test_a_shard_rewritten_after_the_query_listed_it_fails_the_read(spark, tmp_path: Path, rewritten) -> None:
    target = tmp_path / "v"
    frame = spark.range(10).selectExpr("format_string('k%03d', id) AS __key__", "cast(id AS string) AS txt")
    frame.coalesce(1).write.format("webdataset").option("maxSamplesPerShard", 5).mode("overwrite").save(str(target))
    shard = target / "shard-000000.tar"
    assert shard.exists() and (target / "shard-000001.tar").exists()

    reading = spark.read.format("webdataset").load(str(target))
    assert reading.columns == ["__key__", "__url__", "txt"]
    reading.explain()  # planned: the manifest is read, the shards listed
    shard.write_bytes(tar_of(rewritten))  # same name, other bytes, before the action

    with pytest.raises(Exception) as failure:
        reading.select("__key__", "txt").collect()
    error = from_spark(failure.value)
    assert isinstance(error, ManifestChanged), failure.value
    assert "shard-000000.tar" in str(error) and "the manifest read when the query started lists 5" in str(error)
