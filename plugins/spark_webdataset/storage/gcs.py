"""Google Cloud Storage (`gs://bucket/path`) with google-cloud-storage.

Shards stream out through resumable uploads (memory: one chunk, never a
whole shard) and stream in through ranged reads (a seek skips payloads
without downloading them). Create-only puts and compare-and-swap use
generation preconditions; a 412 on a retried request is settled by
reading the object back, so a lost response never fails a write that
in fact landed. Credentials are Application Default Credentials, or
none with STORAGE_EMULATOR_HOST; nothing secret is ever logged.
"""

from __future__ import annotations

import functools
import os
from typing import BinaryIO

from ..errors import MissingCredentials, PreconditionFailed, StorageError
from .base import Storage, StoredObject, split_bucket

# Resumable upload chunk. A task's worker holds about two (BlobWriter's buffer, the chunk copy it
# sends): 16 MiB put a worker writing 1 MiB samples at ~320 MiB to gs:// against ~265 MiB to local
# disk (the Python worker RSS target is 300 MiB); 8 MiB is still GCS's recommended minimum size.
UPLOAD_CHUNK_BYTES = 8 * 1024 * 1024
READ_CHUNK_BYTES = 8 * 1024 * 1024
HTTP_POOL_CONNECTIONS = 32  # per host: at least GCSStorage.concurrent_requests, with room for other threads


def split(uri: str) -> tuple[str, str]:
    return split_bucket(uri, "gs")


def _sized_pool(client):
    """requests keeps 10 connections per host by default: more threads than that (the commit's
    parallel renames) would open and drop extra ones, logging "Connection pool is full"."""
    from requests.adapters import HTTPAdapter

    session = client._http  # an AuthorizedSession (a requests.Session), made on first use
    for prefix, adapter in list(session.adapters.items()):
        if type(adapter) is HTTPAdapter:  # leave a mutual-TLS adapter as it is
            session.mount(
                prefix,
                HTTPAdapter(
                    pool_connections=HTTP_POOL_CONNECTIONS,
                    pool_maxsize=HTTP_POOL_CONNECTIONS,
                    max_retries=adapter.max_retries,
                ),
            )
    return client


@functools.cache
def _client_for_process(pid: int, emulator: str | None):
    from google.cloud import storage

    project = os.environ.get("GOOGLE_CLOUD_PROJECT")
    if emulator:
        from google.auth.credentials import AnonymousCredentials

        return _sized_pool(storage.Client(project=project or "emulator", credentials=AnonymousCredentials()))
    from google.auth.exceptions import DefaultCredentialsError

    try:
        return _sized_pool(storage.Client(project=project))
    except DefaultCredentialsError as error:
        raise MissingCredentials(
            "gs:// needs Google Cloud credentials: Application Default Credentials "
            "(`gcloud auth application-default login`, GOOGLE_APPLICATION_CREDENTIALS, or a service "
            f"account on GCE/Dataproc/GKE), or STORAGE_EMULATOR_HOST for an emulator ({error})"
        ) from None


def client():
    """One client per process (clients do not survive fork) and endpoint."""
    return _client_for_process(os.getpid(), os.environ.get("STORAGE_EMULATOR_HOST"))


def _retry():
    from google.cloud.storage.retry import DEFAULT_RETRY

    # 408, 429, 5xx and connection errors, exponential backoff, bounded in time.
    return DEFAULT_RETRY.with_timeout(300.0)


def _is_precondition_failure(error: Exception) -> bool:
    from google.api_core import exceptions

    return isinstance(error, exceptions.PreconditionFailed)


class GCSStorage(Storage):
    # A rename is a server-side rewrite and a delete: latency-bound, so the commit runs many at
    # once (the client's connection pool is sized for them, see HTTP_POOL_CONNECTIONS).
    concurrent_requests = 16

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])

    def _blob(self, path: str):
        bucket, name = split(path)
        return client().bucket(bucket).blob(name)

    def open_write(self, path: str) -> BinaryIO:
        blob = self._blob(path)
        blob.chunk_size = UPLOAD_CHUNK_BYTES
        return blob.open("wb", ignore_flush=True, retry=_retry())

    def open_read(self, path: str) -> BinaryIO:
        from google.api_core import exceptions

        blob = self._blob(path)
        try:
            blob.reload(retry=_retry())
        except exceptions.NotFound:
            raise StorageError(f"{path}: no such object") from None
        return blob.open("rb", chunk_size=READ_CHUNK_BYTES, retry=_retry())

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """One GET with a Range header, no metadata request (the caller knows what it wants)."""
        from google.api_core import exceptions

        if length <= 0:
            return b""
        try:
            return self._blob(path).download_as_bytes(
                start=offset, end=offset + length - 1, checksum=None, retry=_retry()
            )
        except exceptions.NotFound:
            raise StorageError(f"{path}: no such object") from None
        except exceptions.RequestRangeNotSatisfiable:
            return b""  # past the object's end

    def exists(self, path: str) -> bool:
        return self._blob(path).exists(retry=_retry())

    def _list(self, directory: str):
        """The objects one level below `directory`, the sub-prefixes, and the prefix; a bucket that
        is not there is a StorageError naming it."""
        from google.api_core import exceptions

        bucket, prefix = split(directory)
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        listing = client().list_blobs(bucket, prefix=prefix, delimiter="/", retry=_retry())
        try:
            blobs = list(listing)  # prefixes are filled in as pages are read
        except exceptions.NotFound:
            raise StorageError(f"{directory}: there is no bucket {bucket!r}") from None
        return blobs, listing.prefixes, prefix

    def list_sizes(self, directory: str) -> dict[str, int]:
        blobs, _, prefix = self._list(directory)
        return {blob.name[len(prefix) :]: blob.size for blob in blobs if blob.name != prefix}

    def objects(self, directory: str) -> dict[str, StoredObject]:
        blobs, _, prefix = self._list(directory)
        return {
            blob.name[len(prefix) :]: StoredObject(blob.size, blob.generation, blob.crc32c)
            for blob in blobs
            if blob.name != prefix
        }

    def list_dirs(self, directory: str) -> list[str]:
        _, prefixes, prefix = self._list(directory)
        return sorted(p[len(prefix) :].rstrip("/") for p in prefixes)

    def delete(self, path: str) -> None:
        from google.api_core import exceptions

        try:
            self._blob(path).delete(retry=_retry())
        except exceptions.NotFound:
            pass

    def newest_modification(self, directory: str) -> float | None:
        bucket, prefix = split(directory)
        prefix = prefix.rstrip("/") + "/"
        times = [blob.updated.timestamp() for blob in client().list_blobs(bucket, prefix=prefix, retry=_retry())]
        return max(times) if times else None

    def remove_empty_dir(self, directory: str) -> None:
        pass

    def crc32c_below(self, directory: str) -> dict[str, str] | None:
        """From the listing (a page per 1000 objects): the server's crc32c of what it stored."""
        bucket, prefix = split(directory)
        prefix = prefix.rstrip("/") + "/"
        blobs = client().list_blobs(bucket, prefix=prefix, retry=_retry())
        return {blob.name[len(prefix) :]: blob.crc32c for blob in blobs}

    def delete_tree(self, directory: str) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from google.api_core import exceptions

        bucket, prefix = split(directory)
        prefix = prefix.rstrip("/") + "/"

        def delete(blob) -> None:
            try:
                blob.delete(retry=_retry())
            except exceptions.NotFound:
                pass

        # One request an object: a job's staging (a key run per task) goes `concurrent_requests` at a time.
        with ThreadPoolExecutor(max_workers=self.concurrent_requests, thread_name_prefix="gcs-delete") as pool:
            for _ in pool.map(delete, client().list_blobs(bucket, prefix=prefix, retry=_retry())):
                pass

    def _copy_checked(self, source: str, target: str, **preconditions: int) -> None:
        """Server-side rewrite, checked against the source's size and crc32c."""
        source_blob = self._blob(source)
        source_blob.reload(retry=_retry())
        target_blob = self._blob(target)
        token, _, _ = target_blob.rewrite(source_blob, retry=_retry(), **preconditions)
        while token is not None:
            token, _, _ = target_blob.rewrite(source_blob, token=token, retry=_retry(), **preconditions)
        # The last rewrite response carries the new object's resource (size, crc32c): no reload.
        if (target_blob.size, target_blob.crc32c) != (source_blob.size, source_blob.crc32c):
            raise StorageError(
                f"{target}: copy of {source} does not match it (size {target_blob.size} vs {source_blob.size}, "
                f"crc32c {target_blob.crc32c} vs {source_blob.crc32c})"
            )

    def rename_new(self, source: str, target: str) -> None:
        """As `rename`, but the copy is create-only (`ifGenerationMatch=0` on the target)."""
        from google.api_core import exceptions

        try:
            self._copy_checked(source, target, if_generation_match=0)
        except exceptions.PreconditionFailed:
            raise PreconditionFailed(f"{target} exists already") from None
        self.delete(source)

    def same_object(self, first: str, second: str) -> bool:
        from google.api_core import exceptions

        try:
            blobs = [self._blob(first), self._blob(second)]
            for blob in blobs:
                blob.reload(retry=_retry())
        except exceptions.NotFound:
            return False
        return (blobs[0].size, blobs[0].crc32c) == (blobs[1].size, blobs[1].crc32c)

    def identities(self, directory: str) -> dict[str, object]:
        blobs, _, prefix = self._list(directory)
        return {blob.name[len(prefix) :]: blob.generation for blob in blobs if blob.name != prefix}

    def delete_if_identity(self, path: str, identity: object) -> bool:
        return self.delete_if(path, identity)

    def write_atomic(self, path: str, data: bytes) -> None:
        self._blob(path).upload_from_string(data, retry=_retry(), checksum="crc32c")

    def _conditional_put(self, path: str, data: bytes, generation: int) -> bool:
        """Upload if the object's generation is `generation` (0: absent); settle 412s by reading back."""
        blob = self._blob(path)
        try:
            blob.upload_from_string(data, if_generation_match=generation, retry=_retry(), checksum="crc32c")
            return True
        except Exception as error:  # noqa: BLE001 - only 412 is handled here
            if not _is_precondition_failure(error):
                raise
        current, _ = self.read_versioned(path)
        # A retried request whose first attempt landed sees its own write.
        return current == data

    def create_only(self, path: str, data: bytes) -> None:
        if not self._conditional_put(path, data, 0):
            raise PreconditionFailed(f"{path} exists already")

    def read_versioned(self, path: str) -> tuple[bytes | None, object]:
        from google.api_core import exceptions

        blob = self._blob(path)
        try:
            blob.reload(retry=_retry())
            data = blob.download_as_bytes(if_generation_match=blob.generation, retry=_retry())
        except exceptions.NotFound:
            return None, 0
        except exceptions.PreconditionFailed:
            return self.read_versioned(path)  # changed between reload and download
        return data, blob.generation

    def replace_if(self, path: str, data: bytes, token: object) -> bool:
        return self._conditional_put(path, data, int(token or 0))

    def delete_if(self, path: str, token: object) -> bool:
        from google.api_core import exceptions

        try:
            self._blob(path).delete(if_generation_match=int(token or 0), retry=_retry())
        except exceptions.NotFound:
            return False  # gone already: a retried delete whose first attempt landed, or someone else's
        except exceptions.PreconditionFailed:
            return False
        return True
