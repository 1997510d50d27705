"""Validation catches each defect injected into real shards; publish refuses, and races settle."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_webdataset.cli import main as cli
from spark_webdataset.dataset.publish import PublishRefused, publish, read_latest, shard_index
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.jobs.validate_spark import spark_check
from tests.support.helpers import publish_race, run_cli, shard_paths, text_v1
from tests.support.tars import tar_samples

Members = list[tuple[tarfile.TarInfo, bytes]]


@pytest.fixture(scope="module")
def written_version(spark, digits_source, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    target = root / "versions" / "v1"
    (
        spark.read.parquet(digits_source)
        .selectExpr("format_string('d/%05d', id) AS __key__", "image AS png", "label AS cls")
        .repartition(2)
        .write.format("webdataset")
        .option("maxShardBytes", "512KiB")
        .mode("overwrite")
        .save(str(target))
    )
    return root


@pytest.fixture
def root(written_version, tmp_path) -> Path:
    copy = tmp_path / "root"
    shutil.copytree(written_version, copy)
    return copy


def version(root: Path) -> Path:
    return root / "versions" / "v1"


def read_members(path: Path) -> Members:
    with tarfile.open(path) as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else b"") for m in tar.getmembers()]


def write_members(path: Path, members: Members) -> None:
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


def rewrite(path: Path, change: Callable[[Members], Members]) -> None:
    write_members(path, change(read_members(path)))


def shard(root: Path, index: int) -> Path:
    return version(root) / f"shard-{index:06d}.tar"


def flip_byte(root: Path) -> None:
    path = shard(root, 1)
    data = bytearray(path.read_bytes())
    data[512 + 100] ^= 0xFF  # inside the first member's payload
    path.write_bytes(bytes(data))


def truncate(root: Path) -> None:
    path = shard(root, 0)
    path.write_bytes(path.read_bytes()[:-2000])


def not_adjacent(root: Path) -> None:
    rewrite(shard(root, 0), lambda m: [m[0], m[2], m[1], *m[3:]])  # a.png b.png a.cls ...


def field_twice(root: Path) -> None:
    rewrite(shard(root, 0), lambda m: [m[0], m[0], *m[1:]])


def key_in_two_shards(root: Path) -> None:
    first = read_members(shard(root, 0))[:2]
    rewrite(shard(root, 1), lambda m: m + first)


def shard_missing(root: Path) -> None:
    shard(root, 1).unlink()


def extra_shard(root: Path) -> None:
    shutil.copy(shard(root, 0), version(root) / "shard-000099.tar")


def symlink_member(root: Path) -> None:
    link = tarfile.TarInfo("d/99999.lnk")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    rewrite(shard(root, 0), lambda m: m + [(link, b"")])


def dotdot_member(root: Path) -> None:
    evil = tarfile.TarInfo("../evil.txt")
    evil.size = 3
    rewrite(shard(root, 0), lambda m: m + [(evil, b"bad")])


DEFECTS = {
    "truncated tar": (truncate, "truncated"),
    "flipped byte": (flip_byte, "crc32c"),
    "members not adjacent": (not_adjacent, "not adjacent"),
    "field twice": (field_twice, "appears twice in one sample"),
    "key in two shards": (key_in_two_shards, "key appears in shards shard-000000.tar, shard-000001.tar"),
    "shard missing": (shard_missing, "listed in the manifest but missing"),
    "extra shard": (extra_shard, "not listed in the manifest"),
    "symlink member": (symlink_member, "not a regular file"),
    "../ member name": (dotdot_member, "not a safe <key>.<field> name"),
}


def test_a_good_version_validates_and_publishes(root: Path) -> None:
    report = validate_version(str(version(root)))
    assert report.ok, report.summary()
    assert report.samples == 1797 and len(report.shards) >= 2
    result = publish(str(root), "v1")
    assert (result.samples, result.already_published, result.latest) == (1797, False, "v1")
    index = json.loads((version(root) / "shardindex.json").read_text())
    assert index["__kind__"] == "wids-shard-index-v1" and sum(s["nsamples"] for s in index["shardlist"]) == 1797
    assert publish(str(root), "v1").already_published


@pytest.mark.parametrize("defect", list(DEFECTS))
def test_validation_catches_defect_and_publish_refuses(root: Path, defect: str) -> None:
    inject, message = DEFECTS[defect]
    inject(root)
    report = validate_version(str(version(root)), workers=2)
    assert not report.ok
    assert any(message in error["error"] for error in report.errors), report.summary()
    error = next(e for e in report.errors if message in e["error"])
    assert error["shard"], error
    assert json.loads((version(root) / "_validation.json").read_text())["ok"] is False
    with pytest.raises(PublishRefused, match="validation failed"):
        publish(str(root), "v1")
    assert not (root / "_published").exists() and read_latest(str(root)) is None


def test_validation_with_spark_finds_keys_in_two_shards(spark, root: Path) -> None:
    key_in_two_shards(root)
    report = validate_version(str(version(root)), check=spark_check("local[2]"))
    assert any("key appears in shards shard-000000.tar, shard-000001.tar" in e["error"] for e in report.errors)


def test_publish_refuses_unvalidated_and_changed_manifests(root: Path) -> None:
    with pytest.raises(PublishRefused, match="not validated"):
        publish(str(root), "v1")
    assert validate_version(str(version(root))).ok
    manifest = version(root) / "_manifest.json"
    manifest.write_text(manifest.read_text().replace('"mtime": 0', '"mtime": 1'))
    with pytest.raises(PublishRefused, match="another manifest"):
        publish(str(root), "v1")


def test_cli_validate_and_publish_exit_codes(root: Path, capsys) -> None:
    assert cli(["validate", "--quiet", str(version(root))]) == 0
    assert cli(["publish", str(root), "v1"]) == 0
    assert cli(["inspect", str(root), "--json"]) == 0
    out = capsys.readouterr().out
    assert '"latest": "v1"' in out
    truncate(root)
    assert cli(["validate", "--quiet", str(version(root))]) == 1


def test_racing_publishers_leave_one_record(root: Path) -> None:
    assert validate_version(str(version(root))).ok
    outcomes = publish_race(root, ["v1", "v1"])
    assert sorted(outcomes) == ["noop", "won"]
    assert [p.name for p in (root / "_published").iterdir()] == ["v1.json"]
    assert read_latest(str(root)) == "v1"


def test_versions_published_at_once_leave_latest_on_the_greater(root: Path) -> None:
    for name in ("20261201T000000Z", "20261202T000000Z"):
        shutil.copytree(version(root), root / "versions" / name)
        assert validate_version(str(root / "versions" / name)).ok
    for _ in range(3):
        for record in (root / "_published").glob("*.json") if (root / "_published").exists() else []:
            record.unlink()
        (root / "LATEST").unlink(missing_ok=True)
        outcomes = publish_race(root, ["20261202T000000Z", "20261201T000000Z"])
        assert outcomes == ["won", "won"]
        assert read_latest(str(root)) == "20261202T000000Z"


def test_shard_index_lists_the_manifest_for_wids_and_is_reproducible(root: Path) -> None:
    import hashlib

    from spark_webdataset.format.manifest import Manifest

    raw = (version(root) / "_manifest.json").read_bytes()
    listed = json.loads(raw)["shards"]
    index_bytes = shard_index(Manifest.from_json(raw), "root@v1")
    index = json.loads(index_bytes)
    assert (index["__kind__"], index["wids_version"], index["name"]) == ("wids-shard-index-v1", 1, "root@v1")
    # one entry per manifest shard, in order: url relative to the index, samples, bytes
    assert [(s["url"], s["nsamples"], s["filesize"]) for s in index["shardlist"]] == [
        (s["name"], s["samples"], s["bytes"]) for s in listed
    ]
    assert len(listed) > 1 and index["samples"] == 1797
    # and the entries are true of the files themselves, counted here without the manifest
    for entry in index["shardlist"]:
        data = (version(root) / entry["url"]).read_bytes()
        assert len(data) == entry["filesize"]
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            keys = list(dict.fromkeys(member.name.split(".", 1)[0] for member in tar.getmembers()))
        assert (len(keys), keys[0], keys[-1]) == (entry["nsamples"], entry["first_key"], entry["last_key"])
        if entry.get("sha256"):
            assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    # same manifest, same bytes: twice from one parse, and from a parse of a copy
    assert shard_index(Manifest.from_json(raw), "root@v1") == index_bytes
    assert shard_index(Manifest.from_json(bytes(bytearray(raw))), "root@v1") == index_bytes


# -- exit codes of the CLI and the build job -----------------------------------------------------


@pytest.mark.slow
def test_cli_publish_of_an_unvalidated_version_exits_1(text_root_copy, tmp_path) -> None:
    done = run_cli("publish", str(text_root_copy), "v1", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("spark-webdataset publish: error:")
    assert "not validated" in done.stderr
    assert not (text_root_copy / "_published").exists() and not (text_root_copy / "LATEST").exists()


@pytest.mark.slow
def test_cli_validate_of_a_broken_version_exits_1(text_root_copy, tmp_path) -> None:
    shard = text_v1(text_root_copy) / "shard-000001.tar"
    shard.write_bytes(shard.read_bytes()[:-3000])
    done = run_cli("validate", "--quiet", "--workers", "1", str(text_v1(text_root_copy)), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED" in done.stdout and "shard-000001.tar" in done.stdout
    assert json.loads((text_v1(text_root_copy) / "_validation.json").read_text())["ok"] is False


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
def test_cli_argument_errors_exit_2(text_root_copy, tmp_path, argv) -> None:
    done = run_cli(*(a.format(root=text_root_copy, v1=text_v1(text_root_copy)) for a in argv), cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.strip() and "Traceback" not in done.stderr
    assert not (text_root_copy / "_published").exists()


# -- validate --require ----------------------------------------------------------------------------


@pytest.mark.slow
def test_validate_require_fails_on_samples_without_the_field(text_root_copy, capsys) -> None:
    from spark_webdataset.cli import main as cli_main
    from spark_webdataset.dataset.validate import validate_version

    uri = str(text_v1(text_root_copy))
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
