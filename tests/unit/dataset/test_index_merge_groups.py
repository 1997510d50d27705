"""The commit's merge in groups: past MERGE_FAN_IN runs, runs are merged a group at a time through
scratch files. The same keys in order and run numbers as one merge, never more runs open than the fan-in, and
a real commit of more tasks than the fan-in indexes every key and names both owners of a duplicate."""

from __future__ import annotations

import io
import random

import numpy as np
import pyarrow as pa
import pytest

from spark_webdataset.dataset.commit import commit_job
from spark_webdataset.dataset.index_merge import MERGE_FAN_IN, merge_in_groups
from spark_webdataset.dataset.random_access import open_samples
from spark_webdataset.errors import DuplicateKey
from spark_webdataset.format.keys import merge_blocks
from spark_webdataset.format.sample_index import task_rows, write_task_run
from tests.unit.dataset.test_commit_parallel import SHARDS, staged_write


def sorted_runs(count: int, seed: int) -> list[list[pa.RecordBatch]]:
    """`count` runs of sorted keys in blocks of 1-5 rows, keys shared between runs (ties)."""
    chance = random.Random(seed)
    runs = []
    for _ in range(count):
        keys = sorted(f"k{chance.randrange(60):03d}" for _ in range(chance.randrange(0, 12)))
        blocks, at = [], 0
        while at < len(keys):
            size = chance.randint(1, 5)
            part = keys[at : at + size]
            blocks.append(pa.record_batch([pa.array(part), pa.array(np.arange(at, at + len(part)))], ["key", "row"]))
            at += size
        runs.append(blocks)
    return runs


def rows_of(merged) -> list[tuple[str, int, int]]:
    """(key, run, row in its run) of every merged row, in order."""
    out = []
    for block, runs_of in merged:
        out += list(zip(block.column(0).to_pylist(), runs_of.tolist(), block.column(1).to_pylist()))
    return out


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("fan_in", [2, 3, 7])
def test_a_merge_in_groups_gives_what_one_merge_gives(tmp_path, seed, fan_in) -> None:
    runs = sorted_runs(40, seed)
    whole = rows_of(merge_blocks(runs))
    open_now, most = 0, 0

    def counted(blocks: list[pa.RecordBatch]):
        nonlocal open_now, most
        open_now += 1
        most = max(most, open_now)
        try:
            yield from blocks
        finally:
            open_now -= 1

    grouped = rows_of(merge_in_groups([counted(run) for run in runs], str(tmp_path), threads=1, fan_in=fan_in))
    # the same keys in order, each row with its run; equal keys (a duplicate, an error in a commit) may
    # come in another order: the scratch files' batches end elsewhere than the merged blocks did
    assert [row[0] for row in grouped] == [row[0] for row in whole]
    assert sorted(grouped) == sorted(whole)
    assert most <= fan_in


def test_a_commit_of_more_tasks_than_the_fan_in_indexes_every_key(tmp_path) -> None:
    assert SHARDS > 2 * MERGE_FAN_IN  # two levels of groups would need more; one level is what this shows
    writer, messages = staged_write(tmp_path)
    manifest = commit_job(writer.commit_request(messages))
    samples = open_samples(str(tmp_path))
    assert list(samples.keys()) == [f"{partition:05d}" for partition in range(SHARDS)]
    assert samples.locate("00150").shard == manifest.shards[150].name


def test_a_duplicate_in_two_groups_names_both_partitions(tmp_path) -> None:
    writer, messages = staged_write(tmp_path)
    assert 3 // MERGE_FAN_IN != 150 // MERGE_FAN_IN  # the two runs are merged in different groups first
    sink = io.BytesIO()
    write_task_run(task_rows(pa.array(["00003"]), 0, [0], [512], [0]), sink)  # partition 150's run says 00003
    writer.version.storage.write_atomic(messages[150].index_path, sink.getvalue())
    with pytest.raises(DuplicateKey, match=r"'00003' in partition 3 and partition 150"):
        commit_job(writer.commit_request(messages))
    assert not (tmp_path / "_manifest.json").exists()
