"""`spark_webdataset.open(uri)` as a map-style dataset of a torch `DataLoader` with worker processes.

A version is written by Spark to a bucket on the GCS emulator; a DataLoader with two workers and
`shuffle=True` reads one epoch through it. Every key comes back exactly once, with the bytes that
`open(uri).get(key)` returns in the test's own process, in an order that is not the key order,
and the samples were read in the workers (their ids and pids are stamped on each sample by the
collate function, which runs in the worker). The workers reach the emulator through
STORAGE_EMULATOR_HOST, which the session's emulator fixture sets.

Both start methods: "fork" (torch's default on Linux; the workers inherit the dataset object and
this process's live Spark JVM connection, which they never touch; storage clients are one per
pid) and "spawn" (the default on macOS and Windows; the dataset reaches the workers pickled to
its location alone).
"""

from __future__ import annotations

import os
import re

import pytest
import torch
from torch.utils.data import DataLoader, get_worker_info

import spark_webdataset

pytestmark = pytest.mark.slow

SAMPLES = 300


def stamp_worker(sample: dict) -> dict:
    """The collate function (batch_size=None: one sample at a time): runs in the worker that read it."""
    info = get_worker_info()
    return {**sample, "__worker__": None if info is None else info.id, "__pid__": os.getpid()}


@pytest.fixture(scope="module")
def version(spark, gcs_emulator) -> str:
    """A gs:// version of 300 samples over several shards: a binary, a text and a number field."""
    name = re.sub(r"[^a-z0-9-]", "-", __name__.lower())[-40:].strip("-") + f"-{os.getpid()}"
    gcs_emulator.create_bucket(name)
    uri = f"gs://{name}/data/versions/v1"
    (
        spark.range(0, SAMPLES)
        .selectExpr(
            "format_string('s%06d', id) AS __key__",
            "unhex(sha2(cast(id AS STRING), 256)) AS bin",
            "repeat(concat('text ', id, ' '), cast(id % 13 AS INT)) AS txt",
            "CAST(id % 10 AS INT) AS cls",
        )
        .repartition(3)
        .write.format("webdataset")
        .option("maxShardBytes", "64KiB")
        .mode("overwrite")
        .save(uri)
    )
    return uri


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_dataloader_with_two_workers_reads_a_shuffled_epoch(version, start_method) -> None:
    expected_reader = spark_webdataset.open(version)
    keys = list(expected_reader.keys())
    assert len(keys) == SAMPLES and keys == sorted(keys)
    loader = DataLoader(
        spark_webdataset.open(version),
        batch_size=None,
        shuffle=True,
        num_workers=2,
        collate_fn=stamp_worker,
        multiprocessing_context=start_method,
        generator=torch.Generator().manual_seed(21),
        timeout=120,  # a worker that hangs fails the test instead of waiting for pytest's timeout
    )
    order, workers, pids = [], set(), set()
    for sample in loader:
        workers.add(sample.pop("__worker__"))
        pids.add(sample.pop("__pid__"))
        key = sample["__key__"]
        order.append(key)
        assert sample == expected_reader.get(key), key
        assert set(sample) == {"__key__", "bin", "txt", "cls"}
        assert isinstance(sample["bin"], bytes) and len(sample["bin"]) == 32
    assert sorted(order) == keys  # every key exactly once
    assert order != keys  # shuffled
    assert workers == {0, 1}  # both workers read samples, none was read in this process
    assert len(pids) == 2 and os.getpid() not in pids
