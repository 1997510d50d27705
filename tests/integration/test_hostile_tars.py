"""Hostile tars (issue 19) through Spark's reader: the shard and the header offset in the failure,
the same rule as the validator, skipped and counted when asked. The tars (tests/support/tars.py)
and the parsers without Spark: tests/unit/format/test_verify_hostile_tars.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_webdataset.errors import BadPaxRecord, MemberSizeError, TarFormatError, from_spark
from tests.support.tars import END, HUGE, bogus_pax_length, huge_base256, member, pax_size_past_the_end, version_with

# -- the malformed inputs ----------------------------------------------------------------------


# -- validation: a report whatever it meets; the CLI: one line, no traceback ---------------------


# -- Spark's reader: the shard and the offset in the failure ---------------------------------------


def spark_failure(call) -> tuple[Exception, TarFormatError]:
    with pytest.raises(Exception) as failure_info:
        call()
    typed = from_spark(failure_info.value)
    assert isinstance(typed, TarFormatError), failure_info.value
    return failure_info.value, typed


def test_spark_reader_names_shard_and_offset_of_a_base256_size(spark, tmp_path: Path) -> None:
    directory = version_with(tmp_path / "v", huge_base256())
    raw, typed = spark_failure(lambda: spark.read.format("webdataset").load(str(directory)).collect())
    assert isinstance(typed, MemberSizeError)
    text = str(raw)
    assert "MemoryError" not in text
    assert "shard-000000.tar: offset 1024: member 'b.txt' is truncated" in text
    assert f"its size, {HUGE} bytes (base-256), runs past the end of the shard" in text


def test_spark_reader_and_validator_fail_a_bogus_pax_length_with_the_same_rule(spark, tmp_path: Path) -> None:
    from spark_webdataset.dataset.validate import validate_version

    data = bogus_pax_length()
    directory = version_with(tmp_path / "v", data)
    raw, typed = spark_failure(lambda: spark.read.format("webdataset").load(str(directory)).collect())
    assert isinstance(typed, BadPaxRecord)
    [error] = validate_version(str(directory), workers=1).errors
    assert error["offset"] == 1024
    assert f"shard-000000.tar: offset {error['offset']}: {error['error']}" in str(raw)


def test_spark_reader_fails_a_pax_size_past_the_end(spark, tmp_path: Path) -> None:
    directory = version_with(tmp_path / "v", pax_size_past_the_end())
    raw, typed = spark_failure(lambda: spark.read.format("webdataset").load(str(directory)).collect())
    assert isinstance(typed, MemberSizeError) and "shard-000000.tar: offset 2048" in str(raw)


def test_spark_reader_skips_and_counts_a_hostile_shard_when_asked(spark, tmp_path: Path) -> None:
    shards = tmp_path / "foreign"
    shards.mkdir()
    (shards / "shard-000000.tar").write_bytes(member("k1.txt", b"1") + member("k2.txt", b"2") + END)
    (shards / "shard-000001.tar").write_bytes(huge_base256())
    counted = tmp_path / "bad"
    frame = (
        spark.read.format("webdataset")
        .schema("__key__ string, txt binary")
        .option("skipBadShards", "true")
        .option("badShardsDir", str(counted))
        .load(str(shards))
    )
    assert sorted(r["__key__"] for r in frame.collect()) == ["k1", "k2"]
    [record] = [json.loads(p.read_text()) for p in counted.glob("*.json")]
    assert record["shard"].endswith("shard-000001.tar") and "offset 1024" in record["error"]
