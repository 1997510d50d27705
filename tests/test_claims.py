"""README claims that had no test of their own (issue 14).

Typed decoding of other tools' shards, skipBadShards with several bad
shards, reshard's pattern input / too-few-rows / exit codes, append's field
check and the build job's --mode append, CLI and job exit codes,
`validate --require`, --source-table and --seed, a non-default mtime, and
the gs:// rename's crc32c check. Real Spark, real files, a real GCS API;
the one fake is the injected crc32c fault (see that test).
"""

from __future__ import annotations

import datetime
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from helpers import assert_version_consistent, manifest, shard_paths
from spark_webdataset.errors import (
    BadOption,
    FieldMismatch,
    InputError,
    StorageError,
    from_spark,
)
from spark_webdataset.dataset.layout import Dataset

MTIME = 1_700_000_000  # not the default 0


# -- shared data ----------------------------------------------------------------------------------


def write_tar(path: Path, members: list[tuple[str, bytes]]) -> Path:
    """A shard as another tool writes it: Python's tarfile, members in the given order."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_234_567
            tar.addfile(info, io.BytesIO(data))
    return path


def tar_samples(paths) -> dict[str, dict[str, bytes]]:
    """key -> {field: payload} over shards, read with Python's tarfile."""
    samples: dict[str, dict[str, bytes]] = {}
    for path in paths:
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                key, _, field = member.name.partition(".")
                samples.setdefault(key, {})[field] = tar.extractfile(member).read()
    return samples


def tar_keys(paths) -> list[str]:
    """Sample keys in tar order (each key once)."""
    keys: list[str] = []
    for path in paths:
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                key = member.name.partition(".")[0]
                if not keys or keys[-1] != key:
                    keys.append(key)
    return keys


@pytest.fixture(scope="module")
def written(spark, tmp_path_factory) -> Path:
    """ROOT with versions/v1: 120 samples k000..k119 in 3 shards of 40, `txt` missing where id % 7 == 3,
    written with mtime=MTIME. Tests only read it (or copy it first)."""
    root = tmp_path_factory.mktemp("claims") / "root"
    (
        spark.range(120)
        .selectExpr(
            "format_string('k%03d', id) AS __key__",
            "CASE WHEN id % 7 = 3 THEN NULL ELSE concat('text ', id) END AS txt",
            "CAST(id % 10 AS INT) AS cls",
        )
        .coalesce(1)
        .write.format("webdataset")
        .option("maxSamplesPerShard", "40")
        .option("mtime", str(MTIME))
        .mode("overwrite")
        .save(str(root / "versions" / "v1"))
    )
    return root


def v1(root: Path) -> Path:
    return root / "versions" / "v1"


@pytest.fixture
def copied(written, tmp_path) -> Path:
    """A private copy of the shared root, for tests that write into it."""
    return Path(shutil.copytree(written, tmp_path / "root"))


def run_python(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """A fresh interpreter (its own Spark driver when the code starts one), output captured."""
    env = {
        **os.environ,
        "SPARK_MASTER": "local[1]",
        "PYTHONUNBUFFERED": "1",
        "PYSPARK_SUBMIT_ARGS": "--conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false "
        "--conf spark.sql.shuffle.partitions=2 pyspark-shell",
    }
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spark_webdataset.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


# -- 1. typed decoding of shards other tools wrote ------------------------------------------------

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
    frame = spark.read.format("webdataset").schema("__key__ string, at timestamp, cls int, flag boolean").load(
        str(foreign / "good.tar")
    )
    rows = {r["__key__"]: r for r in frame.selectExpr("__key__", "unix_micros(at) AS micros", "cls", "flag").collect()}
    assert sorted(rows) == sorted(ZONED)
    for index, key in enumerate(ZONED):
        instant = datetime.datetime.fromisoformat(ZONED[key].replace("Z", "+00:00"))
        assert rows[key]["micros"] == int(instant.timestamp() * 1_000_000), key  # the zone is honoured
        assert rows[key]["flag"] is (FLAGS[key] == b"true")
        assert rows[key]["cls"] == index * 3
    assert rows["s000"]["micros"] == int(datetime.datetime(2026, 12, 1, 8, tzinfo=datetime.timezone.utc).timestamp() * 1e6)


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


# -- 2. skipBadShards beyond one truncated shard --------------------------------------------------


@pytest.fixture(scope="module")
def with_bad_shards(tmp_path_factory) -> Path:
    """shard-000000..4: 0 and 3 good (10 samples each); 1 truncated after good samples; 2 not a tar at all;
    4 good until a key comes back (members not adjacent) at its end."""
    directory = tmp_path_factory.mktemp("bad")

    def members(first: int, count: int) -> list[tuple[str, bytes]]:
        return [m for i in range(first, first + count) for m in ((f"b{i:03d}.txt", b"t%d" % i), (f"b{i:03d}.cls", b"%d" % i))]

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
    frame = spark.read.format("webdataset").option("skipBadShards", "true").load(
        str(with_bad_shards / "shard-{000002..000003}.tar")
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


# -- 3. reshard: pattern input, too few rows, exit codes ------------------------------------------


def reshard_args(*argv: str):
    from spark_webdataset.jobs.reshard import parser

    return parser().parse_args(list(argv))


@pytest.mark.slow
def test_reshard_reads_a_shard_pattern(spark, written, tmp_path) -> None:
    from spark_webdataset.jobs.reshard import reshard

    pattern = str(v1(written) / "shard-{000000..000001}.tar")
    summary = reshard(spark, reshard_args("--input", pattern, "--output", str(tmp_path), "--version", "r",
                                          "--max-samples-per-shard", "30"))  # fmt: skip
    out = tmp_path / "versions" / "r"
    document = assert_version_consistent(out)
    assert summary["samples"] == document["samples"] == 80  # the two matched shards, not the third
    assert all(s["samples"] <= 30 for s in document["shards"])
    source = shard_paths(v1(written))[:2]
    assert tar_samples(shard_paths(out)) == tar_samples(source)  # member bytes copied as they are
    assert tar_keys(shard_paths(out)) == tar_keys(source)  # --order source keeps the order


@pytest.mark.slow
def test_reshard_refuses_more_shards_than_rows(spark, written, tmp_path) -> None:
    from spark_webdataset.jobs.reshard import reshard

    args = reshard_args("--input", str(v1(written)), "--output", str(tmp_path), "--version", "r", "--shard-multiple", "200")
    with pytest.raises(InputError, match="120 samples cannot fill 200 shards"):
        reshard(spark, args)
    assert Dataset(str(tmp_path)).version("r").read_manifest() is None


def test_reshard_main_exit_2_for_bad_input(tmp_path, capsys) -> None:
    from spark_webdataset.jobs.reshard import main

    # a bad version id is refused before any Spark session starts
    assert main(["--input", str(tmp_path), "--output", str(tmp_path), "--version", "../x"]) == 2
    assert "reshard: error:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["--input", str(tmp_path), "--output", str(tmp_path), "--version", "r", "--order", "random"])
    assert exited.value.code == 2
    assert not (tmp_path / "versions").exists()


@pytest.mark.slow
def test_reshard_main_exit_0_on_success(spark, written, tmp_path, capsys) -> None:
    from spark_webdataset.jobs.reshard import main

    assert main(["--input", str(v1(written)), "--output", str(tmp_path / "out"), "--version", "r",
                 "--max-samples-per-shard", "60"]) == 0  # fmt: skip
    document = assert_version_consistent(tmp_path / "out" / "versions" / "r")
    assert f"wrote {len(document['shards'])} shards, 120 samples" in capsys.readouterr().out
    assert all(s["samples"] <= 60 for s in document["shards"])
    assert tar_samples(shard_paths(tmp_path / "out" / "versions" / "r")) == tar_samples(shard_paths(v1(written)))


# -- 4. append: field mismatch, and the build job's --mode append -----------------------------------


@pytest.mark.slow
def test_append_with_other_fields_is_a_field_mismatch_and_changes_nothing(spark, copied) -> None:
    target = v1(copied)
    before = {p.name: p.read_bytes() for p in target.iterdir() if p.is_file()}
    extra = spark.range(5).selectExpr("format_string('x%03d', id) AS __key__", "'t' AS txt", "'{}' AS json")
    with pytest.raises(Exception) as caught:
        extra.write.format("webdataset").mode("append").save(str(target))
    typed = from_spark(caught.value)
    assert isinstance(typed, FieldMismatch), caught.value
    assert "json" in str(typed) and "cls" in str(typed)
    assert {p.name: p.read_bytes() for p in target.iterdir() if p.is_file()} == before
    assert not (target / "_staging").exists() or not any((target / "_staging").iterdir())


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
    new = [target / s["name"] for s in document["shards"][len(earlier):]]
    assert sorted(tar_keys(new)) == [f"{i:04d}" for i in range(60, 100)]


# -- 5. exit codes of the CLI and the build job -----------------------------------------------------


@pytest.mark.slow
def test_cli_publish_of_an_unvalidated_version_exits_1(copied, tmp_path) -> None:
    done = cli("publish", str(copied), "v1", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("spark-webdataset publish: error:")
    assert "not validated" in done.stderr
    assert not (copied / "_published").exists() and not (copied / "LATEST").exists()


@pytest.mark.slow
def test_cli_validate_of_a_broken_version_exits_1(copied, tmp_path) -> None:
    shard = v1(copied) / "shard-000001.tar"
    shard.write_bytes(shard.read_bytes()[:-3000])
    done = cli("validate", "--quiet", "--workers", "1", str(v1(copied)), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED" in done.stdout and "shard-000001.tar" in done.stdout
    assert json.loads((v1(copied) / "_validation.json").read_text())["ok"] is False


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "--workers", "0", "{v1}"],  # argparse: not at least 1
        ["publish", "{root}"],  # argparse: VERSION missing
        ["frobnicate"],  # argparse: no such command
        ["publish", "{root}", "../x"],  # InvalidVersionId: bad input
    ],
)
def test_cli_argument_errors_exit_2(copied, tmp_path, argv) -> None:
    done = cli(*(a.format(root=copied, v1=v1(copied)) for a in argv), cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.strip() and "Traceback" not in done.stderr
    assert not (copied / "_published").exists()


def test_build_job_main_exit_2_for_bad_input(tmp_path, capsys) -> None:
    from spark_webdataset.jobs.build import main

    common = ["--source", str(tmp_path / "src"), "--output", str(tmp_path), "--key", "id"]
    assert main([*common, "--version", "a/b"]) == 2  # refused before any Spark session starts
    err = capsys.readouterr().err
    assert err.startswith("build_webdataset: error:") and "'a/b'" in err
    with pytest.raises(SystemExit) as exited:
        main([*common, "--version", "v", "--order", "random"])
    assert exited.value.code == 2
    with pytest.raises(SystemExit) as exited:
        main(["--output", str(tmp_path), "--version", "v", "--key", "id"])  # neither --source nor --source-table
    assert exited.value.code == 2
    assert not (tmp_path / "versions").exists()


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


# -- 6. validate --require ----------------------------------------------------------------------------


@pytest.mark.slow
def test_validate_require_fails_on_samples_without_the_field(copied, capsys) -> None:
    from spark_webdataset.cli import main as cli_main
    from spark_webdataset.dataset.validate import validate_version

    uri = str(v1(copied))
    first_missing = next(k for k, fields in tar_samples(shard_paths(uri)).items() if "txt" not in fields)
    assert first_missing == "k003"
    assert cli_main(["validate", "--quiet", "--workers", "1", uri]) == 0
    capsys.readouterr()
    assert cli_main(["validate", "--quiet", "--workers", "1", "--require", "txt", uri]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out
    first_error = out.splitlines()[1]
    assert "'k003'" in first_error and "txt" in first_error and "shard-000000.tar" in first_error
    report = validate_version(uri, workers=1, require=["txt"], write_report=False)
    missing = [k for k, fields in tar_samples(shard_paths(uri)).items() if "txt" not in fields]
    assert report.error_count == len(missing) == 17
    assert report.errors[0]["key"] == "k003" and "txt" in report.errors[0]["error"]
    assert [e["key"] for e in report.errors] == missing


# -- 7. --source-table and --seed ---------------------------------------------------------------------


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


# -- 8. a non-default mtime -------------------------------------------------------------------------


@pytest.mark.slow
def test_every_member_carries_the_mtime_option(written) -> None:
    members = 0
    for path in shard_paths(v1(written)):
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                assert member.mtime == MTIME, (path.name, member.name, member.mtime)
                members += 1
    assert members == 120 + 120 - 17  # cls everywhere, txt where not null
    assert manifest(v1(written))["options"]["mtime"] == MTIME


# -- 9. the gs:// rename checks the copy's crc32c ---------------------------------------------------


def test_gcs_rename_refuses_a_copy_whose_crc32c_differs(bucket, monkeypatch) -> None:
    # The one fake in this file: fake-gcs-server copies faithfully, so the corrupted copy is a documented,
    # injected fault -- a real server-side rewrite whose response (the new object's resource, which the
    # rename checks) reports another crc32c. Everything else (upload, rewrite, reload, delete) is real
    # traffic to the emulator.
    from google.cloud.storage import Blob

    from spark_webdataset.storage import storage_for

    storage = storage_for(bucket)
    source = storage.join(bucket, "versions", "v", "_staging", "job", "a.tar")
    target = storage.join(bucket, "versions", "v", "shard-000000.tar")
    storage.write_atomic(source, b"payload " * 1000)
    real_rewrite = Blob.rewrite

    def rewrite_reporting_another_crc32c(self, *args, **kwargs):
        answer = real_rewrite(self, *args, **kwargs)
        if self.name.endswith("shard-000000.tar") and answer[0] is None:
            self._properties["crc32c"] = "AAAAAA=="
        return answer

    monkeypatch.setattr(Blob, "rewrite", rewrite_reporting_another_crc32c)
    with pytest.raises(StorageError) as caught:
        storage.rename_new(source, target)
    assert source in str(caught.value) and target in str(caught.value) and "crc32c" in str(caught.value)
    assert storage.exists(source)  # the staged original is kept for a retry
    monkeypatch.undo()
    storage.rename_new(source, target)  # the same rename without the fault goes through
    assert storage.read_bytes(target) == b"payload " * 1000 and not storage.exists(source)
