"""Copy-on-write changes through the real commit, without Spark: a published parent from the real
ShardWriter, a delete staged as a writer task stages it (an index run of keys), and the rewritten
shards read back by GNU tar, Python's tarfile and `open()`."""

from __future__ import annotations

import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest

import spark_webdataset
from spark_webdataset.dataset import changes
from spark_webdataset.dataset.changes import DELETE, _runs
from spark_webdataset.dataset.commit import CommitRequest, commit_job
from spark_webdataset.dataset.publish import publish
from spark_webdataset.dataset.validate import validate_version
from spark_webdataset.format.sample_index import task_rows, write_task_run
from tests.support.webdataset_ui_data import DIGITS_FIELDS, commit_table, digits_table


@dataclass
class StagedKeys:
    """A delete's task attempt, as the Spark writer's commit message carries it."""

    partition: int
    staging: str
    index_path: str
    deleted_rows: int
    shards: list = field(default_factory=list)
    keys_ascending: bool = True


def _stage_deletion(version_dir: Path, job: str, partition: int, keys: list[str]) -> StagedKeys:
    staging = version_dir / "_staging" / job / f"p{partition:05d}-a0-t{partition}"
    staging.mkdir(parents=True)
    unique = sorted(set(keys))
    zeros = [0] * len(unique)
    with open(staging / "index.arrow", "wb") as sink:
        write_task_run(task_rows(pa.array(unique, pa.string()), 0, zeros, zeros, zeros), sink)
    return StagedKeys(partition, str(staging), str(staging / "index.arrow"), len(keys))


def _delete(root: Path, version: str, parent: str, *tasks: list[str]):
    directory = root / "versions" / version
    directory.mkdir(parents=True)
    attempts = [_stage_deletion(directory, "job1", number, keys) for number, keys in enumerate(tasks)]
    fields = [{"name": name, "type": kind} for name, _, kind in DIGITS_FIELDS]
    request = CommitRequest(
        version_uri=str(directory), job_id="job1", overwrite=True, fields=fields, options={}, attempts=attempts,
        parent=parent, change=DELETE,
    )  # fmt: skip
    return commit_job(request)


@pytest.fixture(scope="module")
def parent(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    """The digits (1,797 samples) published as v1 in shards of 256 KiB; each shard's keys."""
    root = tmp_path_factory.mktemp("changes") / "root"
    commit_table(root, "v1", digits_table())
    assert validate_version(str(root / "versions" / "v1"), workers=1).ok
    publish(str(root), "v1")
    samples = spark_webdataset.open(str(root / "versions" / "v1"))
    by_shard: dict[str, list[str]] = {}
    for key in samples.keys():
        by_shard.setdefault(samples.locate(key).shard, []).append(key)
    return root, by_shard


def test_a_delete_rewrites_the_touched_shards_drops_an_emptied_one_and_counts_absent_keys(parent) -> None:
    root, by_shard = parent
    names = sorted(by_shard)
    emptied, touched = names[1], names[2]
    gone = [*by_shard[emptied], by_shard[touched][3], by_shard[touched][4]]
    manifest = _delete(root, "v2", "v1", gone[:10], [*gone[10:], "no-such-key", gone[0]])
    assert manifest is not None
    assert manifest.run["change"] == {
        "change": "delete", "requested": len(gone) + 2, "added": 0, "replaced": 0, "deleted": len(gone),
        "absent": 1, "shards_rewritten": 1, "shards_emptied": 1, "samples_copied": len(by_shard[touched]) - 2,
    }  # fmt: skip
    locations = [shard.location for shard in manifest.shards]
    assert f"../v1/{emptied}" not in locations and f"../v1/{touched}" not in locations
    (rewritten,) = manifest.own_shards
    assert locations.index(rewritten.name) == names.index(touched) - 1  # in the touched shard's place
    assert rewritten.name == f"shard-{len(names):06d}.tar"  # after every number the parent uses
    version_dir = root / "versions" / "v2"
    path = version_dir / rewritten.name
    assert path.stat().st_size == rewritten.bytes
    kept = [key for key in by_shard[touched] if key not in gone]
    listed = subprocess.run(["tar", "-tf", str(path)], check=True, capture_output=True, text=True).stdout.split()
    assert sorted({name.split(".")[0] for name in listed}) == kept  # GNU tar reads it to its end-of-archive
    with tarfile.open(path) as tar:
        assert len(tar.getmembers()) == len(kept) * len(DIGITS_FIELDS)
    report = validate_version(str(version_dir), workers=1)
    assert report.ok, report.summary()
    samples = spark_webdataset.open(str(version_dir))
    assert len(samples) == sum(map(len, by_shard.values())) - len(gone)
    before = spark_webdataset.open(str(root / "versions" / "v1"))
    for key in kept:
        assert samples.get(key) == before.get(key)
    assert not any(key in samples for key in gone)
    assert not (version_dir / "_staging").exists()


def test_runs_read_adjacent_samples_together_up_to_the_read_size(monkeypatch) -> None:
    kept = pa.table({"offset": [0, 100, 300, 400, 500], "length": [100, 100, 100, 100, 100]})
    assert list(_runs(kept)) == [(0, 2, 0, 200), (2, 5, 300, 300)]
    monkeypatch.setattr(changes, "READ_BYTES", 250)
    assert list(_runs(kept)) == [(0, 2, 0, 200), (2, 4, 300, 200), (4, 5, 500, 100)]
    monkeypatch.setattr(changes, "READ_BYTES", 50)  # a sample larger than the read size is one read
    assert list(_runs(kept)) == [(0, 1, 0, 100), (1, 2, 100, 100), (2, 3, 300, 100), (3, 4, 400, 100), (4, 5, 500, 100)]
