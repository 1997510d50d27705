"""A dataset root without Spark: layout rules, the commit lock, inspect, the CLI and the consumer.

Versions here are committed by the format core itself (ShardWriter shards
and a manifest listing them), then validated and published by the real
validate/publish code on local files.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from spark_webdataset.airflow.consumer import read_published
from spark_webdataset.cli import main as cli
from spark_webdataset.dataset.catalog import describe, format_description
from spark_webdataset.dataset.layout import Dataset, Version
from spark_webdataset.dataset.lock import CommitLock
from spark_webdataset.dataset.ordering import iso_utc, parse_logical_date, timestamp_in_id
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.tree import WRITER_MARK, WRITER_MARK_NAME, shard_name
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import ConcurrentCommit, InvalidVersionId, NotCommitted
from spark_webdataset.format.encode import encode_column
from spark_webdataset.format.manifest import MANIFEST_KIND
from spark_webdataset.format.sample_reader import iter_samples
from spark_webdataset.format.shard_writer import ShardWriter


def commit_version(root: Path, version: str, keys: list[str], max_shard_bytes: int = 8192) -> Path:
    """Shards from the ShardWriter, our writer's mark and a manifest listing them, as a commit leaves them."""
    directory = root / "versions" / version
    directory.mkdir(parents=True)
    (directory / WRITER_MARK_NAME).write_bytes(WRITER_MARK)
    writer = ShardWriter(["txt", "cls"], lambda index: open(directory / shard_name(index), "wb"), max_shard_bytes)
    writer.write_batch(
        pa.array(keys),
        [
            encode_column(pa.array([f"text of {k}" * 20 for k in keys]), "txt"),
            encode_column(pa.array(range(len(keys))), "cls"),
        ],
    )
    writer.close()
    shards = []
    for path in sorted(directory.glob("shard-*.tar")):
        data = path.read_bytes()
        with open(path, "rb") as stream:
            found = [sample.key for sample in iter_samples(stream)]
        shards.append(
            {
                "name": path.name,
                "samples": len(found),
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "first_key": found[0],
                "last_key": found[-1],
            }
        )
    manifest = {
        "__kind__": MANIFEST_KIND,
        "samples": sum(s["samples"] for s in shards),
        "bytes": sum(s["bytes"] for s in shards),
        "shard_count": len(shards),
        "shards": shards,
        "key": "__key__",
        "fields": [{"name": "txt", "type": "string"}, {"name": "cls", "type": "bigint"}],
        "options": {"maxShardBytes": max_shard_bytes},
        "sample_index": None,
        "run": {},
    }
    (directory / "_manifest.json").write_text(json.dumps(manifest, indent=1))
    return directory


# -- layout ----------------------------------------------------------------------------------------


def test_a_root_has_one_spelling_and_its_paths_stay_inside_it(tmp_path: Path) -> None:
    assert Dataset(f"file://{tmp_path}/ds/").root == f"{tmp_path}/ds"
    version = Version.at(f"file://{tmp_path}/ds/versions/v1/")
    assert (version.id, version.dataset) == ("v1", Dataset(str(tmp_path / "ds")))
    assert version.sample_index_dir_uri == f"{tmp_path}/ds/versions/v1/_index"
    assert version.lock_uri == f"{tmp_path}/ds/versions/v1/_commit.lock"


@pytest.mark.parametrize(
    "version, expected",
    [
        ("daily-20261115T063000Z", datetime.datetime(2026, 11, 15, 6, 30, tzinfo=datetime.timezone.utc)),
        ("run-2026-11-15T06:30:00-a", datetime.datetime(2026, 11, 15, 6, 30, tzinfo=datetime.timezone.utc)),
        ("v20261115", datetime.datetime(2026, 11, 15, tzinfo=datetime.timezone.utc)),
        ("v20261341", None),  # eight digits, but no date: not a timestamp
        ("2026-02-30", None),  # shaped like a date, but there is no 30 February
        ("backup", None),
    ],
)
def test_timestamps_are_read_from_version_ids_only_when_they_are_dates(version: str, expected) -> None:
    assert timestamp_in_id(version) == expected


def test_logical_dates_are_iso_8601_and_naive_means_utc() -> None:
    assert iso_utc(datetime.datetime(2026, 11, 15, 1, 2, 3)) == "2026-11-15T01:02:03Z"
    east = datetime.timezone(datetime.timedelta(hours=2))
    assert iso_utc(datetime.datetime(2026, 11, 15, 1, 2, 3, tzinfo=east)) == "2026-11-14T23:02:03Z"
    assert parse_logical_date("2026-11-15") == datetime.datetime(2026, 11, 15, tzinfo=datetime.timezone.utc)
    assert iso_utc(parse_logical_date(" 2026-11-15T01:00:00+02:00 ")) == "2026-11-14T23:00:00Z"
    with pytest.raises(InvalidVersionId, match="logical date 'yesterday' is not ISO-8601"):
        parse_logical_date("yesterday")


def test_a_root_without_latest_says_publish_first(tmp_path: Path) -> None:
    commit_version(tmp_path, "v1", ["a"])
    with pytest.raises(NotCommitted, match="no LATEST; publish a version first"):
        Dataset(str(tmp_path)).latest()


# -- the commit lock -------------------------------------------------------------------------------


def lock_holder(version: Version) -> dict:
    data, _ = version.storage.read_versioned(version.lock_uri)
    assert data is not None
    return json.loads(data)


def test_an_expired_lease_is_taken_over_and_the_loser_can_neither_renew_nor_release_it(tmp_path: Path, caplog) -> None:
    version = Dataset(str(tmp_path)).version("v1")
    dead = CommitLock(version, "job-dead", lease_seconds=-1).acquire()  # its lease ran out as it was written
    with caplog.at_level(logging.WARNING, logger="spark_webdataset.dataset.lock"):
        alive = CommitLock(version, "job-alive", wait_seconds=0).acquire()
    assert "took over the expired commit lock" in caplog.text and "job-dead" in caplog.text
    assert lock_holder(version)["owner"] == "job-alive"
    with pytest.raises(ConcurrentCommit, match="lost the commit lock"):
        dead.renew(force=True)
    dead.release()  # its token is stale: the live holder's lock stays
    assert lock_holder(version)["owner"] == "job-alive"
    alive.release()
    assert not version.storage.exists(version.lock_uri)


def test_a_live_lease_makes_others_wait_then_fail_naming_the_holder(tmp_path: Path) -> None:
    version = Dataset(str(tmp_path)).version("v1")
    with CommitLock(version, "job-1"):
        with pytest.raises(ConcurrentCommit, match=r"another commit \(job-1 on .+\) holds the commit lock; waited 0 s"):
            CommitLock(version, "job-2", wait_seconds=0).acquire()
        again = CommitLock(version, "job-1", wait_seconds=0).acquire()  # its own owner takes it back at once
        assert lock_holder(version)["owner"] == "job-1"
        again.release()
    assert not version.storage.exists(version.lock_uri)


def test_a_waiting_committer_gets_the_lock_once_it_is_released(tmp_path: Path) -> None:
    version = Dataset(str(tmp_path)).version("v1")
    holder = CommitLock(version, "job-1").acquire()
    release = threading.Timer(0.2, holder.release)
    release.start()
    started = time.monotonic()
    with CommitLock(version, "job-2", wait_seconds=30):
        assert lock_holder(version)["owner"] == "job-2"
        assert time.monotonic() - started >= 0.2  # it polled until the release, it did not overtake
    release.join()


def test_renewing_writes_at_most_every_third_of_a_lease(tmp_path: Path) -> None:
    version = Dataset(str(tmp_path)).version("v1")
    with CommitLock(version, "job-1", lease_seconds=600) as lock:
        first = lock_holder(version)
        lock.renew()  # just claimed: nothing to write
        assert lock_holder(version) == first
        lock.renew(force=True)
        renewed = lock_holder(version)
        assert renewed["owner"] == "job-1" and renewed["expires_at"] >= first["expires_at"]
        assert renewed["renewed_at"] > first["renewed_at"]
        lock.renew(force=True)  # its token followed the renewal: renewing again still works


# -- inspect, the CLI and a consumer ----------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """v20261101 published; v20261102 valid, unpublished; v20261103 invalid; one mid-commit; one foreign."""
    root = tmp_path / "ds"
    commit_version(root, "v20261101", [f"a/{i:03d}" for i in range(12)])
    assert validate_version(str(root / "versions" / "v20261101"), workers=1).ok
    publish(str(root), "v20261101")
    commit_version(root, "v20261102", [f"b/{i:03d}" for i in range(3)])
    assert validate_version(str(root / "versions" / "v20261102"), workers=1).ok
    damaged = commit_version(root, "v20261103", ["c/0", "c/1"])
    (damaged / "shard-000000.tar").write_bytes((damaged / "shard-000000.tar").read_bytes()[:-1024])
    assert not validate_version(str(damaged), workers=1).ok
    staged = root / "versions" / "mid-commit"
    staged.mkdir()
    (staged / WRITER_MARK_NAME).write_bytes(WRITER_MARK)
    foreign = root / "versions" / "foreign"
    foreign.mkdir()
    (foreign / "data.tar").write_bytes(bytes(1024))
    return root


def test_describe_gives_each_versions_state_counts_and_latest(root: Path) -> None:
    description = describe(str(root))
    assert description["latest"] == "v20261101"
    by_id = {v["version"]: v for v in description["versions"]}
    published = by_id["v20261101"]
    assert (published["published"], published["validated"], published["logical_date"]) == (
        True,
        True,
        "2026-11-01T00:00:00Z",
    )
    assert (published["samples"], published["shards"]) == (
        12,
        len(list((root / "versions" / "v20261101").glob("*.tar"))),
    )
    assert published["bytes"] == sum(p.stat().st_size for p in (root / "versions" / "v20261101").glob("*.tar"))
    assert (
        by_id["v20261102"]["published"],
        by_id["v20261102"]["validated"],
        by_id["v20261102"]["samples"],
    ) == (False, True, 3)
    assert by_id["v20261103"]["validated"] is False
    assert (by_id["mid-commit"]["state"], by_id["mid-commit"]["samples"]) == ("not committed", None)
    assert (by_id["foreign"]["state"], by_id["foreign"]["validated"]) == ("foreign", None)
    assert {v: by_id[v]["state"] for v in ("v20261101", "v20261102", "v20261103")} == {
        "v20261101": "latest",
        "v20261102": "valid",
        "v20261103": "invalid",
    }
    assert by_id["v20261102"]["logical_date"] == "2026-11-02T00:00:00Z"  # unpublished: the date its id spells


def test_inspect_prints_one_line_a_version_marking_latest(root: Path, capsys) -> None:
    assert cli(["inspect", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{root}  LATEST=v20261101"
    line = {row.split()[1] if row.startswith(" *") else row.split()[0]: row for row in lines[1:]}
    assert line["v20261101"].startswith(" * v20261101") and "2026-11-01T00:00:00Z" in line["v20261101"]
    assert line["v20261101"].rstrip().endswith("latest") and "12 samples" in line["v20261101"]
    assert line["v20261102"].rstrip().endswith("valid")
    errors = {v["version"]: v["validation_errors"] for v in describe(str(root))["versions"]}["v20261103"]
    assert errors and line["v20261103"].rstrip().endswith(f" invalid ({errors} errors)")
    assert line["mid-commit"].rstrip().endswith("not committed") and line["foreign"].rstrip().endswith("foreign")
    assert format_description(describe(str(root))).splitlines() == lines


def test_a_consumer_reads_the_published_version_through_its_wids_index(
    root: Path, capsys, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("WIDS_CACHE", str(tmp_path / "wids-cache"))  # not the shared /tmp/_wids_cache
    directory = root / "versions" / "v20261101"
    shards = len(list(directory.glob("shard-*.tar")))
    assert shards > 1
    extra = {"version": "v20261101", "index": str(directory / "shardindex.json"), "shards": shards}
    assert read_published(extra) == {"version": "v20261101", "samples": 12}
    out = capsys.readouterr().out
    assert f"version v20261101: 12 samples in {shards} shards; first sample 'a/000' has ['.cls', '.txt']" in out


def test_cli_workers_must_be_a_whole_number(capsys) -> None:
    with pytest.raises(SystemExit) as exit:
        cli(["validate", "somewhere", "--workers", "two"])
    assert exit.value.code == 2
    assert "'two' is not a whole number" in capsys.readouterr().err


def test_cli_writes_the_demo_source(tmp_path: Path, capsys) -> None:
    import pyarrow.parquet as pq

    assert cli(["demo-source", str(tmp_path / "digits"), "--files", "3"]) == 0
    assert capsys.readouterr().out.strip() == f"wrote 1797 digits to {tmp_path / 'digits'} (3 parquet files)"
    files = sorted((tmp_path / "digits").glob("*.parquet"))
    assert len(files) == 3 and sum(pq.read_metadata(f).num_rows for f in files) == 1797
