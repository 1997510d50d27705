"""gc and pin on local disk: what goes, what stays, and that a gc killed anywhere reruns to the same end.

One root is built once (real shards, index, manifests, validation and publish; no Spark) and copied
per test:

    v1                  published 2026-10-01, no parent (nothing references it)
    v2 <- v3 <- v4 <- v5 published 2026-11-01..04, each built on the one before; LATEST = v5
    tmp-dead            committed, never published, no job
    tmp-broken          our writer's mark and a stray shard, no manifest (a job that died)
    foreign             a directory of tars nothing of ours wrote
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import spark_webdataset
from spark_webdataset import fault_points as faults
from spark_webdataset.dataset.build_rules import parse_duration
from spark_webdataset.dataset.catalog import describe_root
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.publish import publish, set_latest
from spark_webdataset.dataset.retention import PROOF_FILES, RetentionPolicy, collect, pin, plan, unpin
from spark_webdataset.dataset.staging import _proc_stat
from spark_webdataset.dataset.tree import LEASE_NAME, WRITER_MARK, WRITER_MARK_NAME
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.errors import BadOption, PublishRefused, RetentionRefused
from spark_webdataset.fault_points import InjectedFault
from tests.support.chains import build_chain, commit_version, publish_version

KEEP_TWO = RetentionPolicy(keep_last=2, min_age_seconds=0)
THREE_DAYS = 3 * 86400.0


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("template") / "ds"
    publish_version(str(root), "v1", 1000, 30, logical_date="2026-10-01T00:00:00Z")
    build_chain(root, ["v2", "v3", "v4", "v5"])
    commit_version(str(root), "tmp-dead", 2000, 10)
    broken = root / "versions" / "tmp-broken"
    broken.mkdir()
    (broken / WRITER_MARK_NAME).write_bytes(WRITER_MARK)
    (broken / "shard-000000.tar").write_bytes(b"\0" * 2048)
    foreign = root / "versions" / "foreign"
    foreign.mkdir()
    (foreign / "part-0.tar").write_bytes(b"\0" * 1024)
    return root


def copy_of(template: Path, copy: Path) -> Path:
    """Hard links: the same files (the storage identities validation recorded stay true); every write
    of ours replaces a file or makes a new one, and gc unlinks, so the template never changes."""
    shutil.copytree(template, copy, copy_function=os.link)
    return copy


@pytest.fixture
def root(template, tmp_path) -> Path:
    return copy_of(template, tmp_path / "ds")


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under the root: relative path -> (size, sha256)."""
    return {
        str(path.relative_to(root)): (path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def samples(uri: Path | str) -> list[tuple[str, dict]]:
    """Every sample of a version (or the root's LATEST) in key order, through the sample index."""
    reader = spark_webdataset.open(str(uri))
    return [(key, reader.get(key)) for key in reader.keys()]


def under(state: dict, *prefixes: str) -> dict:
    return {path: value for path, value in state.items() if path.startswith(prefixes)}


def referenced_from(root: Path, version: str, stored_in: str) -> set[str]:
    manifest = Dataset(str(root)).version(version).read_manifest()
    return {entry.name for entry in manifest.shards if entry.version == stored_in}


def test_gc_retires_what_the_policy_does_not_keep_and_kept_versions_read_identically(root) -> None:
    before = snapshot(root)
    read_before = {v: samples(root / "versions" / v) for v in ("v4", "v5")}
    latest_before = samples(root)

    report = collect(str(root), KEEP_TWO)

    assert report.retired == ["v1", "v2", "v3"]
    assert report.removed_unpublished == ["tmp-broken", "tmp-dead"]
    assert set(report.kept) == {"v4", "v5", "foreign"} and "latest" in report.kept["v5"]
    after = snapshot(root)
    # kept versions: every byte of their directories, records and LATEST unchanged; they read the same
    kept = ("versions/v4/", "versions/v5/", "versions/foreign/", "_published/v4.json", "_published/v5.json", "LATEST")
    assert under(after, *kept) == under(before, *kept)
    assert {v: samples(root / "versions" / v) for v in ("v4", "v5")} == read_before
    assert samples(root) == latest_before
    # a kept child still proves the shards it references by the retired versions' validation reports
    assert validate_version(str(root / "versions" / "v5"), workers=1, write_report=False).ok
    # retired: invisible (no record; inspect does not show them published), unreferenced files gone
    dataset = Dataset(str(root))
    assert dataset.published_ids() == ["v4", "v5"]
    states = {v.version: v.state.value for v in describe_root(str(root)).versions}
    assert states == {"v2": "retired", "v3": "retired", "v4": "published", "v5": "latest", "foreign": "foreign"}
    assert not (root / "versions" / "v1").exists() and not (root / "versions" / "tmp-dead").exists()
    for retired in ("v2", "v3"):  # exactly the shards kept versions reference, and their proof
        held = referenced_from(root, "v5", retired) | referenced_from(root, "v4", retired)
        assert held and set(os.listdir(root / "versions" / retired)) == held | set(PROOF_FILES)
        assert report.still_referenced[retired] == sorted(held)
    gone = set(before) - set(after)
    assert report.bytes_freed == sum(before[path][0] for path in gone)
    deleted = {str(Path(uri).relative_to(root)) for uri in report.files_deleted}
    marks = {f"versions/{v}/_RETIRED" for v in ("v1", "tmp-broken", "tmp-dead")}  # written, then deleted last
    assert deleted == gone | marks
    # a rerun has nothing left to do
    again = collect(str(root), KEEP_TWO)
    assert again.files_deleted == [] and again.retired == [] and snapshot(root) == after


def test_latest_pinned_young_and_live_versions_survive(root) -> None:
    future = time.time() + THREE_DAYS  # every version published 3 days before `future`
    # published just now: all younger than the default min-age of 24 h, none goes
    assert plan(str(root), RetentionPolicy(keep_last=1)).retired == []
    assert plan(str(root), RetentionPolicy(keep_last=1, keep_days=4), now=future).retired == []
    pin(str(root), "v1", by="test", reason="the paper's numbers")
    set_latest(str(root), "v3", by="test")  # LATEST set back by hand
    commit_version(str(root), "tmp-young", 3000, 5)  # committed an hour before `future`: waits for validation
    for path in (root / "versions" / "tmp-young").rglob("*"):
        os.utime(path, (future - 3600, future - 3600))
    commit_version(str(root), "tmp-live", 4000, 5)  # a live job's staging (its driver: this process)
    job = root / "versions" / "tmp-live" / "_staging" / "job-1"
    job.mkdir(parents=True)
    me = _proc_stat(os.getpid())
    (job / LEASE_NAME).write_text(
        json.dumps({"job_id": "job-1", "host": os.uname().nodename, "driver_pid": os.getpid(), "driver_started": me[2]})
    )

    report = collect(str(root), RetentionPolicy(keep_last=2, min_age_seconds=parse_duration("24h")), now=future)

    assert report.kept["v1"] == ["pinned"] and report.kept["v3"] == ["latest"]
    assert report.kept["tmp-young"] == ["younger than min-age"] and report.kept["tmp-live"] == ["live job job-1"]
    assert set(report.kept) == {"v1", "v3", "v4", "v5", "tmp-young", "tmp-live", "foreign"}
    assert report.retired == ["v2"] and report.removed_unpublished == ["tmp-broken", "tmp-dead"]
    assert Dataset(str(root)).published_ids() == ["v1", "v3", "v4", "v5"] and Dataset(str(root)).read_latest() == "v3"
    assert len(samples(root)) == 80 and len(samples(root / "versions" / "v1")) == 30
    # unpinned, v1 goes at the next gc
    assert unpin(str(root), "v1") and not unpin(str(root), "v1")
    assert collect(str(root), RetentionPolicy(keep_last=2, min_age_seconds=86400), now=future).retired == ["v1"]


def test_dry_run_changes_no_byte_and_plans_what_gc_then_frees(root) -> None:
    def state() -> dict:
        return {path: (value, os.stat(root / path).st_mtime_ns) for path, value in snapshot(root).items()}

    before = state()
    planned = collect(str(root), KEEP_TWO, dry_run=True)
    cli = subprocess.run(
        [sys.executable, "-m", "spark_webdataset.cli", "gc", str(root), "--keep-last", "2", "--min-age", "0", "--dry-run"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert "would free" in cli.stdout and " retired  v1" in cli.stdout
    described = describe_root(str(root), KEEP_TWO)  # inspect --keep-last: "what gc would free"
    assert described.gc["retire"] == ["v1", "v2", "v3"] and described.gc["bytes"] == planned.bytes_freed
    inspected = subprocess.run(
        [sys.executable, "-m", "spark_webdataset.cli", "inspect", str(root), "--keep-last", "2", "--min-age", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (
        "gc --keep-last 2 would free" in inspected.stdout
        and "retire v1, v2, v3; remove tmp-broken, tmp-dead" in inspected.stdout
    )
    assert state() == before
    assert planned.dry_run and planned.retired == ["v1", "v2", "v3"] and planned.bytes_freed > 0
    done = collect(str(root), KEEP_TWO)
    assert done.bytes_freed == planned.bytes_freed
    assert set(planned.files_deleted) <= set(done.files_deleted)  # (done: also the _RETIRED marks it wrote)


def _run_gc(root: Path, fault: str | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    if fault:
        env[faults.ENV] = f"{fault}=stop"  # the gc freezes itself there: the test then SIGKILLs it
    command = [sys.executable, "-m", "spark_webdataset.cli", "gc", str(root), "--keep-last", "2", "--min-age", "0"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_stopped(process: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read().decode()
        with open(f"/proc/{process.pid}/stat") as stream:
            if stream.read().rsplit(")", 1)[1].split()[0] == "T":
                return
        time.sleep(0.02)
    raise AssertionError("gc never reached its fault point")


@pytest.fixture(scope="module")
def uninterrupted(template, tmp_path_factory) -> dict:
    """What one gc, never interrupted, leaves (run by the CLI, like the killed ones)."""
    root = copy_of(template, tmp_path_factory.mktemp("uninterrupted") / "ds")
    process = _run_gc(root)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()
    return snapshot(root)


@pytest.mark.parametrize("point", ["gc:record-deleted", "gc:shard-deleted", "gc:manifest-deleted"])
def test_a_gc_killed_at_any_point_reruns_to_the_state_one_gc_leaves(root, point, uninterrupted) -> None:
    before = snapshot(root)
    read_before = samples(root)
    process = _run_gc(root, point)
    _wait_stopped(process)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    # killed: kept versions intact and readable
    kept = ("versions/v4/", "versions/v5/", "_published/v4.json", "_published/v5.json", "LATEST")
    assert under(snapshot(root), *kept) == under(before, *kept) and samples(root) == read_before
    if point == "gc:record-deleted":  # the first record went, nothing else yet
        assert Dataset(str(root)).published_ids() == ["v2", "v3", "v4", "v5"]
        assert set(before) - set(snapshot(root)) == {"_published/v1.json"}
    v1 = root / "versions" / "v1"
    if point == "gc:shard-deleted":  # records gone, v1's first shard gone, its manifest still there
        assert Dataset(str(root)).published_ids() == ["v4", "v5"]
        assert not (v1 / "shard-000000.tar").exists() and (v1 / "shard-000001.tar").exists()
        assert (v1 / "_manifest.json").exists()
    if point == "gc:manifest-deleted":  # v1's data and manifest gone; its mark still says a rerun removes it
        assert not (v1 / "_manifest.json").exists() and (v1 / "_RETIRED").exists()
        assert not list(v1.glob("*.tar")) and (v1 / "_SEALED").exists()
    # the rerun finishes the job: the same files with the same bytes as one uninterrupted gc
    rerun = _run_gc(root)
    out, err = rerun.communicate(timeout=60)
    assert rerun.returncode == 0, err.decode()
    assert snapshot(root) == uninterrupted
    assert samples(root) == read_before


def test_a_version_marked_by_an_interrupted_gc_and_pinned_since_is_kept_and_unmarked(root) -> None:
    faults.install("gc:marked", "raise")  # the first version's mark is written, its record not deleted yet
    with pytest.raises(InjectedFault):
        collect(str(root), KEEP_TWO)
    v1 = Dataset(str(root)).version("v1")
    assert v1.is_published() and Path(v1.retired_uri).exists()
    pin(str(root), "v1")  # still published: the pin wins over the interrupted gc
    report = collect(str(root), KEEP_TWO)
    assert report.kept["v1"] == ["pinned"] and not Path(v1.retired_uri).exists()
    assert len(samples(root / "versions" / "v1")) == 30


def test_a_retired_version_cannot_be_published_or_pinned_again(root) -> None:
    collect(str(root), KEEP_TWO)
    with pytest.raises(PublishRefused, match="gc retired this version"):
        publish(str(root), "v2")
    assert not Dataset(str(root)).version("v2").is_published()
    with pytest.raises(RetentionRefused, match="retired by gc"):
        pin(str(root), "v2")
    with pytest.raises(RetentionRefused, match="no version 'nope' to pin"):
        pin(str(root), "nope")


def test_the_cli_pins_unpins_and_refuses_bad_policies(root) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "spark_webdataset.cli", *args], capture_output=True, text=True, timeout=60
        )

    assert cli("pin", str(root), "v1", "--by", "me").returncode == 0
    assert Dataset(str(root)).pinned_ids() == ["v1"]
    done = cli("gc", str(root), "--keep-last", "2", "--min-age", "0s")
    assert done.returncode == 0 and " kept     v1 (pinned)" in done.stdout and "freed" in done.stdout
    assert cli("unpin", str(root), "v1").returncode == 0 and Dataset(str(root)).pinned_ids() == []
    missing = cli("pin", str(root), "v9")
    assert missing.returncode == 1 and "no version 'v9' to pin" in missing.stderr
    assert cli("gc", str(root), "--keep-last", "0").returncode == 2
    assert cli("gc", str(root), "--keep-last", "1", "--min-age", "soon").returncode == 2
    with pytest.raises(BadOption):
        RetentionPolicy(keep_last=0)
    assert parse_duration("90m") == 5400 and parse_duration("7d") == 7 * 86400 and parse_duration("30") == 30


def test_a_version_kept_while_gc_runs_keeps_the_shards_it_references(tmp_path) -> None:
    root = tmp_path / "ds"
    publish_version(str(root), "v1", 0, 10, logical_date="2026-10-01T00:00:00Z")
    publish_version(str(root), "w1", 100, 20, logical_date="2026-11-01T00:00:00Z")
    publish_version(str(root), "w2", 200, 20, parent="w1", logical_date="2026-11-02T00:00:00Z")
    publish_version(str(root), "w3", 300, 20, logical_date="2026-11-03T00:00:00Z")  # a full build: no parent
    w2_before = samples(root / "versions" / "w2")
    # planned: keep w3, retire v1, w1, w2; once v1 is marked, LATEST is set back to w2 by hand
    faults.install("gc:marked", lambda: set_latest(str(root), "w2", by="test"))
    report = collect(str(root), RetentionPolicy(keep_last=1, min_age_seconds=0))
    assert report.retired == ["v1", "w1"] and "latest or pinned while gc ran" in report.kept["w2"]
    assert Dataset(str(root)).published_ids() == ["w2", "w3"]
    held = referenced_from(root, "w2", "w1")
    assert held and set(os.listdir(root / "versions" / "w1")) == held | set(PROOF_FILES)
    assert samples(root) == w2_before  # LATEST = w2 reads every sample, w1's shards included


def test_a_publish_racing_gc_over_an_unpublished_version_loses_and_leaves_no_record(tmp_path) -> None:
    root = tmp_path / "ds"
    publish_version(str(root), "v1", 0, 10)
    commit_version(str(root), "v2", 100, 10)
    version = Dataset(str(root)).version("v2")
    assert validate_version(version.uri, workers=1).ok
    # gc marks v2 after publish checked for the mark and before publish creates its record
    faults.install("publish:recording", lambda: Path(version.retired_uri).write_text("{}"))
    with pytest.raises(PublishRefused, match="gc retired this version"):
        publish(str(root), "v2")
    assert not version.is_published() and Dataset(str(root)).read_latest() == "v1"
