"""`spark.read.format("webdataset")`: exact round trips, foreign shards, bad shards, pruning."""

from __future__ import annotations

import datetime
import json
import subprocess
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from spark_webdataset.errors import (
    BadOption,
    InputError,
    from_spark,
)
from tests.support.helpers import run_python
from tests.support.tars import write_tar

pytestmark = pytest.mark.slow

ALL_TYPES = """
    __key__ string, s string, b binary, i int, l bigint, h smallint, t tinyint, f float, d double,
    m decimal(10,3), flag boolean, day date, at timestamp, local timestamp_ntz,
    ints array<int>, attrs map<string,int>, meta struct<name:string,score:double,tags:array<string>>
"""


def all_types_frame(spark):
    return spark.sql(
        """SELECT format_string('k%04d', id) AS __key__,
                  CASE WHEN id % 5 = 0 THEN NULL ELSE concat('text ', id, ' ü') END AS s,
                  unhex(sha2(CAST(id AS STRING), 256)) AS b,
                  CAST(id AS INT) - 50 AS i, id * 1000000007 AS l, CAST(id % 300 AS SMALLINT) AS h,
                  CAST(id % 100 AS TINYINT) AS t, CAST(id / 7.0 AS FLOAT) AS f, id / 3.0D AS d,
                  CAST(id / 8.0 AS DECIMAL(10,3)) AS m, id % 2 = 0 AS flag,
                  date_add(DATE'2024-01-01', CAST(id AS INT)) AS day,
                  TIMESTAMP'2024-03-01 10:00:00.123456' + make_interval(0, 0, 0, 0, 0, 0, id) AS at,
                  TIMESTAMP_NTZ'2024-03-01 10:00:00' + make_interval(0, 0, 0, CAST(id AS INT)) AS local,
                  array(CAST(id AS INT), 2) AS ints, map('a', CAST(id AS INT)) AS attrs,
                  named_struct('name', concat('n', id), 'score', id * 0.5D, 'tags', array('x', 'y')) AS meta
           FROM range(200)"""
    )


def test_round_trip_is_exact_for_every_type(spark, tmp_path) -> None:
    original = all_types_frame(spark)
    target = str(tmp_path / "v")
    original.repartition(3).write.format("webdataset").option("maxShardBytes", "256KiB").mode("overwrite").save(target)
    back = spark.read.format("webdataset").schema(ALL_TYPES).load(target).cache()  # one read task per shard, once
    assert back.rdd.getNumPartitions() == len(list(Path(target).glob("shard-*.tar"))) > 3
    assert back.count() == 200
    # set operations refuse maps: compare them as their sorted entries
    original, back = (f.withColumn("attrs", F.map_entries("attrs")) for f in (original, back))
    assert original.exceptAll(back).count() == 0
    assert back.exceptAll(original).count() == 0


def test_default_schema_is_binary_fields_with_url(spark, tmp_path) -> None:
    target = str(tmp_path / "v")
    all_types_frame(spark).limit(5).write.format("webdataset").mode("overwrite").save(target)
    frame = spark.read.format("webdataset").load(target)
    assert frame.columns[:2] == ["__key__", "__url__"]
    assert {f.dataType.simpleString() for f in frame.schema.fields[2:]} == {"binary"}
    row = frame.where("__key__ = 'k0001'").first()
    assert row["i"] == b"-49" and row["__url__"].endswith("shard-000000.tar")


def test_dataset_root_reads_latest_and_patterns_expand(spark, tmp_path) -> None:
    root = tmp_path / "root"
    for version, count in (("v1", 10), ("v2", 30)):
        spark.range(count).selectExpr("format_string('k%03d', id) AS __key__", "id AS cls").coalesce(1).write.format(
            "webdataset"
        ).option("maxSamplesPerShard", 10).mode("overwrite").save(str(root / "versions" / version))
    from spark_webdataset.dataset.publish import publish
    from spark_webdataset.dataset.validate import validate_version

    for version in ("v1", "v2"):
        assert validate_version(str(root / "versions" / version)).ok
        publish(str(root), version)
    assert (root / "LATEST").read_text() == "v2\n"
    assert spark.read.format("webdataset").load(str(root)).count() == 30
    pattern = str(root / "versions" / "v2" / "shard-{000000..000001}.tar")
    assert spark.read.format("webdataset").load(pattern).count() == 20
    glob = str(root / "versions" / "v2" / "shard-00000[02].tar")
    assert spark.read.format("webdataset").load(glob).count() == 20


def test_reads_shards_from_webdataset_shardwriter_with_differing_fields(spark, tmp_path) -> None:
    import webdataset as wds

    pattern = str(tmp_path / "foreign-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=4) as sink:
        for i in range(10):
            sample = {"__key__": f"img{i:03d}", "txt": f"caption {i}"}
            if i % 2 == 0:
                sample["cls"] = str(i)
            sink.write(sample)
    frame = (
        spark.read.format("webdataset")
        .schema("__key__ string, txt string, cls int")
        .load(str(tmp_path / "foreign-*.tar"))
    )
    rows = {r["__key__"]: (r["txt"], r["cls"]) for r in frame.collect()}
    assert rows["img000"] == ("caption 0", 0) and rows["img001"] == ("caption 1", None)
    assert len(rows) == 10


def test_reads_a_gnu_tar_of_a_directory(spark, tmp_path) -> None:
    files = tmp_path / "files"
    (files / "a").mkdir(parents=True)
    for name, data in {"a/one.txt": "1", "a/one.json": "{}", "a/two.txt": "2"}.items():
        (files / name).write_text(data)
    shard = tmp_path / "gnu.tar"
    subprocess.run(["tar", "-cf", str(shard), "--sort=name", "-C", str(files), "a"], check=True)
    frame = spark.read.format("webdataset").schema("__key__ string, txt string, json string").load(str(shard))
    # GNU tar adds a directory member "a/": not a <key>.<field> name
    with pytest.raises(Exception, match=r"gnu.tar: offset 0.*not a regular file"):
        frame.collect()
    subprocess.run(
        ["tar", "-cf", str(shard), "--sort=name", "-C", str(files), "a/one.json", "a/one.txt", "a/two.txt"], check=True
    )
    rows = sorted(
        tuple(r)
        for r in spark.read.format("webdataset")
        .schema("__key__ string, txt string, json string")
        .load(str(shard))
        .collect()
    )
    assert rows == [("a/one", "1", "{}"), ("a/two", "2", None)]


def test_bad_shard_fails_with_name_and_offset_or_is_skipped_and_counted(spark, tmp_path) -> None:
    target = tmp_path / "v"
    spark.range(30).selectExpr("format_string('k%03d', id) AS __key__", "repeat('x', 600) AS txt").coalesce(
        1
    ).write.format("webdataset").option("maxSamplesPerShard", 10).mode("overwrite").save(str(target))
    bad = target / "shard-000001.tar"
    bad.write_bytes(bad.read_bytes()[:3000])
    with pytest.raises(Exception, match=r"shard-000001.tar: offset 1536: member 'k011.txt' is truncated"):
        spark.read.format("webdataset").load(str(target)).collect()
    counted = tmp_path / "bad"
    frame = (
        spark.read.format("webdataset")
        .option("skipBadShards", "true")
        .option("badShardsDir", str(counted))
        .load(str(target))
    )
    assert frame.count() == 20
    [record] = [json.loads(p.read_text()) for p in counted.glob("*.json")]
    assert record["shard"].endswith("shard-000001.tar") and "offset 1536" in record["error"]


# -- typed decoding of shards other tools wrote ------------------------------------------------

ZONED = {
    "s000": "2026-12-01T10:00:00+02:00",
    "s001": "2026-12-01T10:00:00-05:30",
    "s002": "2026-12-01T10:00:00.250+01:00",
    "s003": "2026-12-01T10:00:00Z",
}
FLAGS = {"s000": b"true", "s001": b"false", "s002": b"false", "s003": b"true"}


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("foreign")
    members = []
    for index, key in enumerate(ZONED):
        members += [
            (f"{key}.at", ZONED[key].encode()),
            (f"{key}.cls", str(index * 3).encode()),
            (f"{key}.flag", FLAGS[key]),
        ]
    write_tar(directory / "good.tar", members)
    write_tar(directory / "overflow.tar", [("s000.cls", b"7"), ("s001.cls", str(2**40).encode())])
    write_tar(directory / "word.tar", [("s000.cls", b"7"), ("s001.cls", b"8"), ("s002.cls", b"seven")])
    return directory


@pytest.mark.slow
def test_foreign_shard_decodes_true_false_and_zoned_timestamps(spark, foreign) -> None:
    frame = (
        spark.read.format("webdataset")
        .schema("__key__ string, at timestamp, cls int, flag boolean")
        .load(str(foreign / "good.tar"))
    )
    rows = {r["__key__"]: r for r in frame.selectExpr("__key__", "unix_micros(at) AS micros", "cls", "flag").collect()}
    assert sorted(rows) == sorted(ZONED)
    for index, key in enumerate(ZONED):
        instant = datetime.datetime.fromisoformat(ZONED[key].replace("Z", "+00:00"))
        assert rows[key]["micros"] == int(instant.timestamp() * 1_000_000), key  # the zone is honoured
        assert rows[key]["flag"] is (FLAGS[key] == b"true")
        assert rows[key]["cls"] == index * 3
    assert rows["s000"]["micros"] == int(
        datetime.datetime(2026, 12, 1, 8, tzinfo=datetime.timezone.utc).timestamp() * 1e6
    )


@pytest.mark.slow
def test_a_non_number_names_the_field_and_the_key(spark, foreign) -> None:
    with pytest.raises(Exception) as caught:
        spark.read.format("webdataset").schema("__key__ string, cls int").load(str(foreign / "word.tar")).collect()
    typed = from_spark(caught.value)
    assert isinstance(typed, InputError), caught.value
    assert "'s002'" in str(typed) and "'cls'" in str(typed) and "seven" in str(typed)


@pytest.mark.slow
def test_an_integer_overflowing_int_names_the_field_and_the_key(spark, foreign) -> None:
    with pytest.raises(Exception) as caught:
        spark.read.format("webdataset").schema("__key__ string, cls int").load(str(foreign / "overflow.tar")).collect()
    typed = from_spark(caught.value)
    assert isinstance(typed, InputError), str(caught.value)[-600:]
    assert "'s001'" in str(typed) and "'cls'" in str(typed)


# -- skipBadShards beyond one truncated shard --------------------------------------------------


@pytest.fixture(scope="module")
def with_bad_shards(tmp_path_factory) -> Path:
    """shard-000000..4: 0 and 3 good (10 samples each); 1 truncated after good samples; 2 not a tar at all;
    4 good until a key comes back (members not adjacent) at its end."""
    directory = tmp_path_factory.mktemp("bad")

    def members(first: int, count: int) -> list[tuple[str, bytes]]:
        return [
            m
            for i in range(first, first + count)
            for m in ((f"b{i:03d}.txt", b"t%d" % i), (f"b{i:03d}.cls", b"%d" % i))
        ]

    write_tar(directory / "shard-000000.tar", members(0, 10))
    truncated = write_tar(directory / "shard-000001.tar", members(10, 10))
    truncated.write_bytes(truncated.read_bytes()[: 512 * 15 + 100])  # inside sample b013's cls member
    (directory / "shard-000002.tar").write_bytes(b"this is not a tar file\n" * 100)
    write_tar(directory / "shard-000003.tar", members(30, 10))
    write_tar(directory / "shard-000004.tar", members(40, 10) + [("b040.json", b"{}")])
    return directory


BAD = ("shard-000001.tar", "shard-000002.tar", "shard-000004.tar")
PATTERN = "shard-{000000..000004}.tar"


@pytest.mark.slow
def test_skip_bad_shards_skips_each_bad_shard_whole_and_records_it(spark, with_bad_shards, tmp_path) -> None:
    records = tmp_path / "bad-shards"
    frame = (
        spark.read.format("webdataset")
        .schema("__key__ string, txt string, cls int")
        .option("skipBadShards", "true")
        .option("badShardsDir", str(records))
        .load(str(with_bad_shards / PATTERN))
    )
    keys = sorted(r["__key__"] for r in frame.collect())
    # no row of a skipped shard, not even the good samples before its defect
    assert keys == [f"b{i:03d}" for i in [*range(0, 10), *range(30, 40)]]
    assert sorted(p.name for p in records.iterdir()) == ["000001.json", "000002.json", "000004.json"]
    for name in BAD:
        record = json.loads((records / f"{name[6:12]}.json").read_text())
        assert record["shard"] == str(with_bad_shards / name)
        assert name in record["error"] and "offset" in record["error"]
    assert "truncated" in json.loads((records / "000001.json").read_text())["error"]
    assert "not adjacent" in json.loads((records / "000004.json").read_text())["error"]


@pytest.mark.slow
def test_skip_bad_shards_infers_fields_past_a_bad_first_shard(spark, with_bad_shards) -> None:
    frame = (
        spark.read.format("webdataset")
        .option("skipBadShards", "true")
        .load(str(with_bad_shards / "shard-{000002..000003}.tar"))
    )
    assert frame.columns == ["__key__", "__url__", "txt", "cls"]
    assert frame.count() == 10


@pytest.mark.slow
@pytest.mark.parametrize("value", ["maybe", "2"])
def test_a_bad_skip_bad_shards_value_is_a_bad_option(spark, with_bad_shards, value) -> None:
    with pytest.raises(Exception) as caught:
        spark.read.format("webdataset").option("skipBadShards", value).load(str(with_bad_shards / PATTERN)).collect()
    typed = from_spark(caught.value)
    assert isinstance(typed, BadOption), caught.value
    assert "skipBadShards" in str(typed) and repr(value) in str(typed)


@pytest.mark.slow
def test_each_skipped_shard_is_logged_on_stderr(with_bad_shards, tmp_path) -> None:
    """The log line comes from the Python worker; a fresh driver process lets us capture it."""
    code = (
        "import sys\n"
        "from pyspark.sql import SparkSession\n"
        "import spark_webdataset\n"
        "spark = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
        "spark_webdataset.register(spark)\n"
        "frame = spark.read.format('webdataset').schema('__key__ string, cls int')"
        ".option('skipBadShards', 'true').load(sys.argv[1])\n"
        "print('rows', frame.count(), flush=True)\n"
        "spark.stop()\n"
    )
    done = run_python(code, str(with_bad_shards / PATTERN), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rows 20" in done.stdout
    logged = [line for line in (done.stderr + done.stdout).splitlines() if "webdataset: skipped bad shard" in line]
    for name in BAD:
        assert any(f"webdataset: skipped bad shard {with_bad_shards / name}: " in line for line in logged), logged
    assert len(logged) == len(BAD), logged
