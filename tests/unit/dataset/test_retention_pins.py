"""Pins hold against gc's plan and against its re-read (docs/design.md "The versioning promise"; issue 29).

Two bugs these tests exist for: a plan that ignores a pin on an unpublished version (the dry run and
`inspect` would list it as removable, with the bytes it frees), and a re-read that ignores a pin added
while gc runs (the pinned version would be retired). Real shards, real validate and publish (no
Spark); the pin added mid-gc goes in at gc's own fault points (spark_webdataset.fault_points).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import spark_webdataset
from spark_webdataset import fault_points as faults
from spark_webdataset.dataset.catalog import describe_root
from spark_webdataset.dataset.layout import Dataset
from spark_webdataset.dataset.retention import RetentionPolicy, collect, pin, plan
from tests.support.chains import commit_version, publish_version

GO_NOW = RetentionPolicy(keep_last=1, min_age_seconds=0)  # everything but LATEST, pins and live jobs may go


def files_of(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def samples(uri: Path) -> list[tuple[str, dict]]:
    reader = spark_webdataset.open(str(uri))
    return [(key, reader.get(key)) for key in reader.keys()]


@pytest.fixture
def root(tmp_path) -> Path:
    """v1 (published, LATEST), tmp-a (committed, never published, old enough to go), tmp-b (the same)."""
    root = tmp_path / "ds"
    publish_version(str(root), "v1", 0, 10, logical_date="2026-10-01T00:00:00Z")
    commit_version(str(root), "tmp-a", 100, 10)
    commit_version(str(root), "tmp-b", 200, 10)
    return root


@pytest.fixture(autouse=True)
def no_faults_left():
    yield
    faults.clear()


def test_a_pinned_unpublished_version_is_kept_by_the_plan_the_dry_run_inspect_and_gc(root) -> None:
    pin(str(root), "tmp-a", by="test", reason="under review")
    directory = root / "versions" / "tmp-a"
    before = files_of(directory)
    read_before = samples(directory)

    planned = plan(str(root), GO_NOW)
    assert planned.kept["tmp-a"] == ["pinned"]
    assert planned.removed_unpublished == ["tmp-b"] and planned.retired == []
    assert not any("/tmp-a/" in uri for uri in planned.files_deleted)
    tmp_b = root / "versions" / "tmp-b"
    assert planned.bytes_freed == sum(path.stat().st_size for path in tmp_b.rglob("*") if path.is_file())

    dry = collect(str(root), GO_NOW, dry_run=True)
    assert (
        dry.removed_unpublished == ["tmp-b"]
        and dry.kept["tmp-a"] == ["pinned"]
        and dry.bytes_freed == planned.bytes_freed
    )
    gc = describe_root(str(root), retention=GO_NOW).gc
    assert gc is not None and gc["remove"] == ["tmp-b"] and gc["retire"] == [] and gc["bytes"] == planned.bytes_freed
    assert files_of(directory) == before  # planning wrote nothing

    report = collect(str(root), GO_NOW)
    assert report.removed_unpublished == ["tmp-b"] and report.kept["tmp-a"] == ["pinned"]
    assert files_of(directory) == before and samples(directory) == read_before
    assert not tmp_b.exists()


@pytest.mark.parametrize("version", ["v0", "tmp-a"])
def test_a_pin_added_while_gc_runs_keeps_the_version(root, version) -> None:
    """gc planned to retire `version` (published, not LATEST) or remove it (unpublished); a pin arrives
    after the plan and before gc marks it: gc's re-read after its mark must see the pin."""
    if version == "v0":
        publish_version(str(root), "v0", 300, 10, logical_date="2026-09-01T00:00:00Z")
        from spark_webdataset.dataset.publish import set_latest

        set_latest(str(root), "v1", by="test")
    directory = root / "versions" / version
    before = files_of(directory)
    read_before = samples(directory)
    planned = plan(str(root), GO_NOW)
    assert version in planned.retired + planned.removed_unpublished  # without the pin, it would go

    faults.install("gc:planned", lambda: pin(str(root), version, by="test", reason="arrived mid-gc"))
    report = collect(str(root), GO_NOW)

    assert version not in report.retired + report.removed_unpublished
    assert "latest or pinned while gc ran" in report.kept[version]
    assert not any(f"/{version}/" in uri for uri in report.files_deleted)
    assert files_of(directory) == before and samples(directory) == read_before  # its mark went again
    assert Dataset(str(root)).pinned_ids() == [version]
    if version == "v0":
        assert Dataset(str(root)).read_record("v0") is not None  # still published
    assert not (root / "versions" / "tmp-b").exists()  # the rest of the plan went ahead
