"""`gc --dry-run` lists exactly what `gc` then deletes: the same files (the `_RETIRED` marks gc writes and
removes, a dead committer's lock and journal, dead staging, the sample index and shardindex.json
included), the same count and the same bytes, through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from spark_webdataset.dataset.tree import (
    COMMIT_JOURNAL_NAME,
    COMMIT_LOCK_NAME,
    LEASE_NAME,
    RETIRED_NAME,
    WRITER_MARK,
    WRITER_MARK_NAME,
)
from tests.support.chains import commit_version, publish_version
from tests.support.helpers import run_cli

GC = ("--keep-last", "1", "--min-age", "0")


def _ended_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _root(tmp_path: Path) -> Path:
    """Four published versions (three to retire, each with its index files), an unpublished one, one a
    dead committer left (its lock and journal), one a gc retired before it was killed (its mark)."""
    root = tmp_path / "ds"
    for day, version in enumerate(("v1", "v2", "v3", "v4")):
        publish_version(str(root), version, day * 30, 30, logical_date=f"2026-11-{day + 1:02d}T00:00:00Z")
    commit_version(str(root), "tmp-dead", 500, 10)
    dead = root / "versions" / "tmp-dead"
    (dead / COMMIT_LOCK_NAME).write_text(json.dumps({"owner": "gone", "host": "h", "expires_at": 0}))
    (dead / COMMIT_JOURNAL_NAME).write_text("{}")
    staged = dead / "_staging" / "job-1" / "p00000-a0-t0"
    staged.mkdir(parents=True)
    (staged / "000000.tar").write_bytes(b"\0" * 1024)
    ended = _ended_pid()
    (staged.parent / LEASE_NAME).write_text(
        json.dumps({"job_id": "job-1", "host": os.uname().nodename, "driver_pid": ended, "driver_started": 0})
    )  # fmt: skip  (a driver on this host that has ended: its staging is dead)
    marked = root / "versions" / "tmp-marked"
    marked.mkdir()
    (marked / WRITER_MARK_NAME).write_bytes(WRITER_MARK)
    (marked / RETIRED_NAME).write_text("{}\n")
    (marked / "shard-000000.tar").write_bytes(b"\0" * 2048)
    return root


def test_a_dry_run_counts_every_file_the_real_gc_deletes(tmp_path: Path) -> None:
    root = _root(tmp_path)
    dry = run_cli("gc", str(root), *GC, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    text = run_cli("gc", str(root), *GC, "--dry-run")
    done = run_cli("gc", str(root), *GC, "--json")
    assert done.returncode == 0, done.stderr
    deleted = json.loads(done.stdout)
    assert planned["dry_run"] is True and deleted["dry_run"] is False
    assert sorted(planned["retired"]) == sorted(deleted["retired"]) == ["tmp-marked", "v1", "v2", "v3"]
    assert planned["removed_unpublished"] == deleted["removed_unpublished"] == ["tmp-dead"], planned["kept"]
    assert sorted(planned["files_deleted"]) == sorted(deleted["files_deleted"])
    assert planned["bytes_freed"] == deleted["bytes_freed"]
    names = {Path(uri).name for uri in deleted["files_deleted"]}
    assert {RETIRED_NAME, COMMIT_LOCK_NAME, COMMIT_JOURNAL_NAME, "shardindex.json", "000000.tar"} <= names
    assert f"in {len(deleted['files_deleted'])} file(s)" in text.stdout.splitlines()[-1]
    assert sorted(p.name for p in (root / "versions").iterdir()) == ["v4"]
