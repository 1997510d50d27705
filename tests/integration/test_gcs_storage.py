"""The gs:// backend against a real GCS API (fake-gcs-server on loopback)."""

from __future__ import annotations

import multiprocessing

import pytest

from spark_webdataset.errors import (
    StorageError,
)
from spark_webdataset.storage import storage_for
from spark_webdataset.storage.base import PreconditionFailed
from tests.support.fault_proxy import FaultPlan, FaultRule, gcs_through

# A create (ifGenerationMatch=0) of a publish record, an update (ifGenerationMatch=<generation>) of
# LATEST: the request reaches the emulator and takes effect, then its response is lost.
LOSE_RECORD_CREATE = dict(
    kind="drop_after_effect", object=r"(^|/)_published/[^/]+$", method="POST", precondition="create"
)
LOSE_LATEST_UPDATE = dict(kind="drop_after_effect", object=r"(^|/)LATEST$", method="POST", precondition="update")


def test_objects_stream_list_rename_and_delete(bucket: str) -> None:
    storage = storage_for(bucket)
    path = storage.join(bucket, "dir", "a.bin")
    payload = bytes(range(256)) * 100_000  # 25.6 MB: more than one resumable chunk
    with storage.open_write(path) as stream:
        for start in range(0, len(payload), 1 << 20):
            stream.write(payload[start : start + (1 << 20)])
    assert storage.exists(path) and storage.list_sizes(storage.join(bucket, "dir")) == {"a.bin": len(payload)}
    with storage.open_read(path) as stream:
        stream.seek(1_000_000)
        assert stream.read(10) == payload[1_000_000:1_000_010]
    storage.rename_new(path, storage.join(bucket, "final", "b.bin"))
    assert not storage.exists(path)
    assert storage.read_bytes(storage.join(bucket, "final", "b.bin")) == payload
    assert storage.list_dirs(bucket) == ["final"]
    storage.delete_tree(storage.join(bucket, "final"))
    assert storage.list_dirs(bucket) == []


def test_create_only_and_compare_and_swap(bucket: str) -> None:
    storage = storage_for(bucket)
    path = storage.join(bucket, "record.json")
    storage.create_only(path, b"first")
    storage.create_only(path, b"first")  # the same bytes again: the 412 is settled by reading them back
    with pytest.raises(PreconditionFailed):
        storage.create_only(path, b"second")
    data, token = storage.read_versioned(path)
    assert data == b"first"
    assert storage.replace_if(path, b"third", token)
    assert not storage.replace_if(path, b"fourth", token)  # stale generation
    assert storage.read_bytes(path) == b"third"


def test_create_only_whose_response_is_lost_succeeds_and_stays_create_only(bucket: str, gcs_emulator) -> None:
    storage = storage_for(bucket)
    path = storage.join(bucket, "ds", "_published", "v1.json")
    lose = FaultRule(**LOSE_RECORD_CREATE)
    with gcs_through(gcs_emulator.url, FaultPlan(rate=0, rules=[lose])):
        # the write lands, its response is lost; the retry gets 412 and reads back our own bytes
        storage.create_only(path, b"first")
        assert len(lose.hits) == 1, lose.hits
        with pytest.raises(PreconditionFailed):
            storage.create_only(path, b"second")  # not ours: the read-back sees other bytes
    assert storage.read_bytes(path) == b"first"


def test_replace_if_whose_response_is_lost_returns_true(bucket: str, gcs_emulator) -> None:
    storage = storage_for(bucket)
    path = storage.join(bucket, "ds", "LATEST")
    storage.create_only(path, b"v1\n")
    _, token = storage.read_versioned(path)
    lose = FaultRule(**LOSE_LATEST_UPDATE)
    with gcs_through(gcs_emulator.url, FaultPlan(rate=0, rules=[lose])):
        assert storage.replace_if(path, b"v2\n", token) is True
        assert len(lose.hits) == 1, lose.hits
        assert storage.replace_if(path, b"v3\n", token) is False  # the old generation is stale now
    data, new_token = storage.read_versioned(path)
    assert data == b"v2\n" and new_token != token


def _advance(args) -> str:
    import os

    from spark_webdataset.dataset.publish import advance_latest

    root, version, barrier, host = args
    os.environ["STORAGE_EMULATOR_HOST"] = host
    barrier.wait()
    return advance_latest(root, version)


def test_racing_latest_updates_leave_the_greatest(bucket: str, gcs_emulator) -> None:
    from spark_webdataset.dataset.publish import read_latest

    versions = [f"2026110{n}T000000Z" for n in range(1, 7)]
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(len(versions))
        with context.Pool(len(versions)) as pool:
            pool.map(_advance, [(bucket, v, barrier, gcs_emulator.url) for v in versions])
    assert read_latest(bucket) == versions[-1]


# -- the gs:// rename checks the copy's crc32c ---------------------------------------------------


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
