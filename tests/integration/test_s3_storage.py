"""The s3:// backend against a real S3 API (moto in server mode on loopback): every primitive the
commit protocol relies on, and which preconditions the server enforces."""

from __future__ import annotations

import pytest

from spark_webdataset.errors import MissingCredentials, StorageError, UnsupportedScheme
from spark_webdataset.format.checksums import crc32c_extend, crc32c_text
from spark_webdataset.storage import s3 as s3_module
from spark_webdataset.storage import storage_for
from spark_webdataset.storage.base import PreconditionFailed
from spark_webdataset.storage.s3 import PART_BYTES, S3Storage, client, split
from tests.support.python_memory import PythonPeak


def test_storage_for_dispatches_s3_and_names_it_for_unknown_schemes() -> None:
    assert isinstance(storage_for("s3://bucket/ds"), S3Storage)
    with pytest.raises(UnsupportedScheme, match="s3://"):
        storage_for("az://container/ds")


def test_objects_stream_list_rename_and_delete(s3_bucket: str) -> None:
    storage = storage_for(s3_bucket)
    path = storage.join(s3_bucket, "dir", "a.bin")
    payload = bytes(range(256)) * 100_000  # 25.6 MB: four parts of a multipart upload
    with storage.open_write(path) as stream:
        for start in range(0, len(payload), 1 << 20):
            stream.write(payload[start : start + (1 << 20)])
    assert storage.exists(path) and storage.list_sizes(storage.join(s3_bucket, "dir")) == {"a.bin": len(payload)}
    with storage.open_read(path) as stream:
        stream.seek(1_000_000)
        assert stream.read(10) == payload[1_000_000:1_000_010]
        stream.seek(len(payload) - 5)
        assert stream.read(100) == payload[-5:]
    assert storage.read_range(path, 20_000_000, 7) == payload[20_000_000:20_000_007]
    assert storage.read_range(path, len(payload) + 10, 7) == b""
    storage.rename_new(path, storage.join(s3_bucket, "final", "b.bin"))
    assert not storage.exists(path)
    assert storage.read_bytes(storage.join(s3_bucket, "final", "b.bin")) == payload
    assert storage.list_dirs(s3_bucket) == ["final"]
    storage.delete_tree(storage.join(s3_bucket, "final"))
    assert storage.list_dirs(s3_bucket) == []


def test_multipart_upload_keeps_memory_bounded(s3_bucket: str) -> None:
    storage = storage_for(s3_bucket)
    path = storage.join(s3_bucket, "big.bin")
    chunk = bytes(range(256)) * 4096  # 1 MiB
    total = 5 * PART_BYTES + 123
    with PythonPeak() as measured, storage.open_write(path) as stream:
        written = 0
        while written < total:
            piece = chunk[: min(len(chunk), total - written)]
            stream.write(piece)
            written += len(piece)
    assert storage.list_sizes(s3_bucket) == {"big.bin": total}
    assert measured.peak < 4 * PART_BYTES, f"peak {measured.peak} bytes writing {total}: not one part at a time"


def test_server_keeps_the_full_object_crc32c_of_single_and_multipart_uploads(s3_bucket: str) -> None:
    storage = storage_for(s3_bucket)
    small, large = b"small object", bytes(range(256)) * (PART_BYTES // 256 * 2 + 10)
    for name, data in (("small", small), ("large", large)):
        with storage.open_write(storage.join(s3_bucket, "staged", name)) as stream:
            stream.write(data)
    assert storage.crc32c_below(s3_bucket) == {
        "staged/small": crc32c_text(crc32c_extend(0, small)),
        "staged/large": crc32c_text(crc32c_extend(0, large)),
    }
    objects = storage.objects(storage.join(s3_bucket, "staged"))
    assert objects["large"].crc32c == crc32c_text(crc32c_extend(0, large)) and objects["large"].size == len(large)
    # the crc32c survives the create-only rename (a multipart copy), and is checked against the source
    storage.rename_new(storage.join(s3_bucket, "staged", "large"), storage.join(s3_bucket, "final"))
    assert storage.crc32c_below(s3_bucket)["final"] == crc32c_text(crc32c_extend(0, large))


def test_create_only_and_compare_and_swap(s3_bucket: str) -> None:
    storage = storage_for(s3_bucket)
    path = storage.join(s3_bucket, "record.json")
    storage.create_only(path, b"first")
    storage.create_only(path, b"first")  # the same bytes again: the 412 is settled by reading them back
    with pytest.raises(PreconditionFailed):
        storage.create_only(path, b"second")
    data, token = storage.read_versioned(path)
    assert data == b"first"
    assert storage.replace_if(path, b"third", token)
    assert not storage.replace_if(path, b"fourth", token)  # stale ETag
    assert storage.read_bytes(path) == b"third"
    absent, none_token = storage.read_versioned(storage.join(s3_bucket, "nothing"))
    assert absent is None
    assert storage.replace_if(storage.join(s3_bucket, "nothing"), b"made", none_token)  # absent: create-only
    assert not storage.replace_if(storage.join(s3_bucket, "nothing"), b"again", none_token)


def test_the_server_refuses_stale_preconditions_itself(s3_bucket: str) -> None:
    """What the protocol's fencing rests on, asked of the server directly (no read-back in between):
    PutObject If-None-Match, PutObject If-Match and DeleteObject If-Match are all enforced."""
    bucket, _ = split(s3_bucket)
    s3 = client()
    assert s3.request("PUT", bucket, "k", body=b"one", headers={"If-None-Match": "*"}).status == 200
    assert s3.request("PUT", bucket, "k", body=b"two", headers={"If-None-Match": "*"}).status == 412
    etag = s3.request("HEAD", bucket, "k").headers["etag"]
    assert s3.request("PUT", bucket, "k", body=b"three", headers={"If-Match": etag}).status == 200
    assert s3.request("PUT", bucket, "k", body=b"four", headers={"If-Match": etag}).status == 412
    assert s3.request("DELETE", bucket, "k", headers={"If-Match": etag}).status == 412
    assert s3.request("GET", bucket, "k").body == b"three"


def test_delete_if_removes_only_the_object_it_read(s3_bucket: str) -> None:
    storage = storage_for(s3_bucket)
    path = storage.join(s3_bucket, "_commit.json")
    storage.create_only(path, b"journal 1")
    _, old = storage.read_versioned(path)
    storage.delete(path)
    storage.create_only(path, b"journal 2")  # another committer's, under the same name
    assert not storage.delete_if(path, old)
    assert storage.read_bytes(path) == b"journal 2"
    _, current = storage.read_versioned(path)
    assert storage.delete_if(path, current) and not storage.exists(path)
    assert not storage.delete_if(path, current)  # gone already


def test_delete_if_identity_spares_a_newer_object(s3_bucket: str) -> None:
    storage = storage_for(s3_bucket)
    directory = storage.join(s3_bucket, "versions", "v")
    storage.write_atomic(storage.join(directory, "shard-000000.tar"), b"leftover")
    seen = storage.identities(directory)
    storage.write_atomic(storage.join(directory, "shard-000000.tar"), b"committed")
    assert not storage.delete_if_identity(storage.join(directory, "shard-000000.tar"), seen["shard-000000.tar"])
    assert storage.read_bytes(storage.join(directory, "shard-000000.tar")) == b"committed"


def test_rename_new_never_replaces_a_committed_object(s3_bucket: str) -> None:
    storage = storage_for(s3_bucket)
    source, target = storage.join(s3_bucket, "staged.tar"), storage.join(s3_bucket, "shard-000000.tar")
    storage.write_atomic(source, b"late writer")
    storage.write_atomic(target, b"committed")
    with pytest.raises(PreconditionFailed):
        storage.rename_new(source, target)
    assert storage.read_bytes(target) == b"committed"
    assert storage.exists(source)  # nothing lost: the refused rename keeps its source
    assert not storage.same_object(source, target)


def test_listing_pages_through_more_than_one_page(s3_bucket: str, monkeypatch) -> None:
    storage = storage_for(s3_bucket)
    for n in range(7):
        storage.write_atomic(storage.join(s3_bucket, "d", f"o{n}"), b"x" * n)
        storage.write_atomic(storage.join(s3_bucket, "d", f"sub{n}", "inner"), b"y")
    pages = []
    request = s3_module.S3Client.request

    def small_pages(self, method, bucket, key="", **kwargs):
        if kwargs.get("query", {}).get("list-type") == "2":
            kwargs["query"] = {**kwargs["query"], "max-keys": "3"}
            pages.append(kwargs["query"].get("continuation-token"))
        return request(self, method, bucket, key, **kwargs)

    monkeypatch.setattr(s3_module.S3Client, "request", small_pages)
    assert storage.list_sizes(storage.join(s3_bucket, "d")) == {f"o{n}": n for n in range(7)}
    assert len(pages) > 2
    assert storage.list_dirs(storage.join(s3_bucket, "d")) == [f"sub{n}" for n in range(7)]
    assert len(storage.crc32c_below(storage.join(s3_bucket, "d"))) == 14


def test_missing_objects_and_buckets_are_storage_errors(s3_server) -> None:
    storage = storage_for("s3://no-such-bucket-here")
    with pytest.raises(StorageError, match="no-such-bucket-here"):
        storage.list_sizes("s3://no-such-bucket-here/ds")
    with pytest.raises(StorageError, match="no such object"):
        storage.open_read("s3://no-such-bucket-here/x")


def test_no_credentials_is_a_clear_error(monkeypatch, tmp_path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    with pytest.raises(MissingCredentials, match="AWS_ACCESS_KEY_ID"):
        storage_for("s3://b/ds").exists("s3://b/ds/x")


def _losing_first_response(monkeypatch, method: str, header: str) -> list[int]:
    """The one fault the real server cannot make: a request that lands whose response is lost, so the
    client sends it again and the retry meets its own write (412). Both requests are real."""
    statuses: list[int] = []
    request = s3_module.S3Client.request

    def twice(self, verb, bucket, key="", **kwargs):
        if verb == method and header in kwargs.get("headers", {}) and not statuses:
            statuses.append(request(self, verb, bucket, key, **kwargs).status)  # landed; response lost
        return request(self, verb, bucket, key, **kwargs)

    monkeypatch.setattr(s3_module.S3Client, "request", twice)
    return statuses


def test_create_only_whose_response_is_lost_succeeds_and_stays_create_only(s3_bucket, monkeypatch) -> None:
    storage = storage_for(s3_bucket)
    path = storage.join(s3_bucket, "ds", "_published", "v1.json")
    lost = _losing_first_response(monkeypatch, "PUT", "If-None-Match")
    storage.create_only(path, b"first")  # the retry gets 412 and reads back its own bytes
    assert lost == [200]
    with pytest.raises(PreconditionFailed):
        storage.create_only(path, b"second")
    assert storage.read_bytes(path) == b"first"


def test_replace_if_whose_response_is_lost_returns_true(s3_bucket, monkeypatch) -> None:
    storage = storage_for(s3_bucket)
    path = storage.join(s3_bucket, "ds", "LATEST")
    storage.create_only(path, b"v1\n")
    _, token = storage.read_versioned(path)
    lost = _losing_first_response(monkeypatch, "PUT", "If-Match")
    assert storage.replace_if(path, b"v2\n", token) is True
    assert lost == [200]
    assert storage.replace_if(path, b"v3\n", token) is False  # the old ETag is stale now
    data, new_token = storage.read_versioned(path)
    assert data == b"v2\n" and new_token != token


def test_a_rename_whose_completion_response_is_lost_still_lands_once(s3_bucket, monkeypatch) -> None:
    storage = storage_for(s3_bucket)
    source, target = storage.join(s3_bucket, "staged.tar"), storage.join(s3_bucket, "shard-000000.tar")
    storage.write_atomic(source, b"shard bytes" * 1000)
    lost = _losing_first_response(monkeypatch, "POST", "If-None-Match")  # CompleteMultipartUpload
    storage.rename_new(source, target)  # the repeated completion of the same upload is idempotent
    assert lost == [200]
    assert storage.read_bytes(target) == b"shard bytes" * 1000 and not storage.exists(source)


def _advance(args) -> str:
    from spark_webdataset.dataset.publish import advance_latest

    root, version, barrier = args
    barrier.wait()
    return advance_latest(root, version)


def test_racing_latest_updates_leave_the_greatest(s3_bucket: str) -> None:
    import multiprocessing

    from spark_webdataset.dataset.publish import read_latest

    versions = [f"2026110{n}T000000Z" for n in range(1, 7)]
    context = multiprocessing.get_context("spawn")  # children inherit AWS_ENDPOINT_URL and the keys
    with context.Manager() as manager:
        barrier = manager.Barrier(len(versions))
        with context.Pool(len(versions)) as pool:
            pool.map(_advance, [(s3_bucket, v, barrier) for v in versions])
    assert read_latest(s3_bucket) == versions[-1]


def test_a_writer_that_fails_leaves_no_object_and_no_upload(s3_bucket: str) -> None:
    storage = storage_for(s3_bucket)
    bucket, _ = split(s3_bucket)
    for size in (1000, 2 * PART_BYTES + 5):  # one PutObject never sent; a multipart upload aborted
        path = storage.join(s3_bucket, f"partial-{size}.tar")
        with pytest.raises(RuntimeError, match="task failed"):
            with storage.open_write(path) as stream:
                stream.write(b"x" * size)
                raise RuntimeError("task failed")
        assert not storage.exists(path)
    uploads = client().request("GET", bucket, query={"uploads": ""})
    assert uploads.status == 200 and b"<UploadId>" not in uploads.body, uploads.body


def _requests_sent(monkeypatch) -> list[tuple[str, str]]:
    """Every request's verb and query, as sent to the real server (a spy: each still goes out)."""
    sent: list[tuple[str, str]] = []
    request = s3_module.S3Client.request

    def spy(self, verb, bucket, key="", **kwargs):
        sent.append((verb, "&".join(sorted(kwargs.get("query") or {}))))
        return request(self, verb, bucket, key, **kwargs)

    monkeypatch.setattr(s3_module.S3Client, "request", spy)
    return sent


def test_a_rename_completes_its_upload_once_and_nothing_completes_it_again(s3_bucket, monkeypatch) -> None:
    """The copy's upload was once held by a writer object whose finalizer completed it again,
    whenever the collector ran: after another committer replaced the target, that completion
    failed with a 5xx and was retried for minutes (a frozen committer's test hung on it)."""
    import gc

    storage = storage_for(s3_bucket)
    source, target = storage.join(s3_bucket, "staged.tar"), storage.join(s3_bucket, "shard-000000.tar")
    storage.write_atomic(source, b"shard bytes" * 1000)
    sent = _requests_sent(monkeypatch)
    storage.rename_new(source, target)
    gc.collect()
    completions = [request for request in sent if request == ("POST", "uploadId")]
    assert completions == [("POST", "uploadId")], sent
    assert storage.read_bytes(target) == b"shard bytes" * 1000


def test_a_stream_dropped_unclosed_completes_nothing(s3_bucket: str, monkeypatch) -> None:
    """A writer that is dropped (its task died outside a `with`) leaves no partial object:
    IOBase's finalizer closes a stream, and closing completes an upload."""
    import gc

    storage = storage_for(s3_bucket)
    path = storage.join(s3_bucket, "dropped.tar")
    stream = storage.open_write(path)
    stream.write(b"x" * (PART_BYTES + 5))  # one part sent: an upload is open
    sent = _requests_sent(monkeypatch)
    del stream
    gc.collect()
    assert not storage.exists(path)
    assert ("POST", "uploadId") not in sent and ("PUT", "partNumber&uploadId") not in sent, sent
