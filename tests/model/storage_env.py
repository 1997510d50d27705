"""Where one run of the promise machine keeps its root, and the machine's hands on raw storage.

The machine tampers with files and compares trees below the product's back: through the local
file system, the GCS client or plain signed S3 requests directly, never through the product's
Storage (which is under test). For S3 the requests go through `spark_webdataset.storage.s3.client()`:
it is only the SigV4 transport (sign, send, retry), none of the storage's logic (conditions,
checksums, copies, listings' parsing), so the env's GET/PUT/LIST/DELETE are the raw API's.
Each example gets a fresh base (a directory, or a prefix of the bucket) holding the root `ds`, a
sibling `ds-sibling` that shares its name's prefix, and `outside/`: none of them may change but `ds`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import tempfile
import uuid

OUTSIDE = {"outside/a.txt": b"not the dataset's", "ds-sibling/versions/v1/shard-000000.tar": b"\0" * 1024}
LOCK_FILE = ("._", ".lock")  # local storage's lock files: an implementation detail, not content


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _is_lock(relative: str) -> bool:
    name = relative.rsplit("/", 1)[-1]
    return name.startswith(LOCK_FILE[0]) and name.endswith(LOCK_FILE[1])


class _Env:
    """What every env shares: where a version of its root lies."""

    root: str

    def version_uri(self, version: str) -> str:
        return f"{self.root}/versions/{version}"


class _BucketEnv(_Env):
    """An env in a prefix of a bucket (gs://, s3://)."""

    prefix: str

    def _start(self, prefix: str) -> str:
        """The object-name prefix that lists everything below base/prefix ("" for the whole base)."""
        return f"{self.prefix}/{prefix.rstrip('/')}/" if prefix else f"{self.prefix}/"


class LocalEnv(_Env):
    name = "local"

    def __init__(self, top: str) -> None:
        self.top = top

    def fresh(self) -> None:
        self.base = os.path.join(self.top, uuid.uuid4().hex[:12])
        self.root = os.path.join(self.base, "ds")
        for relative, data in OUTSIDE.items():
            path = os.path.join(self.base, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as out:
                out.write(data)

    def cleanup(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    def tree(self, prefix: str) -> dict[str, str]:
        """relative path -> digest of every file below base/prefix ("" for the whole base)."""
        top = os.path.join(self.base, prefix) if prefix else self.base
        out = {}
        for directory, _, files in os.walk(top):
            for name in files:
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, top)
                if _is_lock(relative):
                    continue
                with open(path, "rb") as stream:
                    out[relative] = _digest(stream.read())
        return out

    def dirs(self, prefix: str) -> set[str]:
        top = os.path.join(self.base, prefix)
        return {e for e in os.listdir(top) if os.path.isdir(os.path.join(top, e))} if os.path.isdir(top) else set()

    def read(self, relative: str) -> bytes | None:
        path = os.path.join(self.base, relative)
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as stream:
            return stream.read()

    def write(self, relative: str, data: bytes, keep_mtime: bool = True) -> None:
        path = os.path.join(self.base, relative)
        stat = os.stat(path)
        with open(path, "r+b") as out:
            out.truncate(0)
            out.write(data)
        if keep_mtime:  # a user can set mtime back (item 4's trick); ctime they cannot
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    def delete(self, relative: str) -> None:
        os.unlink(os.path.join(self.base, relative))

    def files(self, prefix: str) -> list[str]:
        top = os.path.join(self.base, prefix)
        return sorted(self.tree(prefix)) if os.path.isdir(top) else []

    def shard_urls_for_webdataset(self, urls: list[str]) -> list[str]:
        return urls


class GcsEnv(_BucketEnv):
    name = "gcs"

    def __init__(self, bucket: str) -> None:
        self.bucket_name = bucket[len("gs://") :]

    @property
    def _bucket(self):
        from spark_webdataset.storage.gcs import client

        return client().bucket(self.bucket_name)

    def fresh(self) -> None:
        self.prefix = uuid.uuid4().hex[:12]
        self.base = f"gs://{self.bucket_name}/{self.prefix}"
        self.root = f"{self.base}/ds"
        for relative, data in OUTSIDE.items():
            self._bucket.blob(f"{self.prefix}/{relative}").upload_from_string(data)

    def cleanup(self) -> None:
        for blob in list(self._bucket.list_blobs(prefix=f"{self.prefix}/")):
            try:
                blob.delete()
            except Exception:  # noqa: BLE001 - cleanup of a test prefix only
                pass

    def tree(self, prefix: str) -> dict[str, str]:
        start = self._start(prefix)
        return {
            blob.name[len(start) :]: f"{blob.crc32c}:{blob.size}:{blob.generation}"
            for blob in self._bucket.list_blobs(prefix=start)
            if not _is_lock(blob.name)
        }

    def dirs(self, prefix: str) -> set[str]:
        return {name.split("/", 1)[0] for name in self.tree(prefix) if "/" in name}

    def read(self, relative: str) -> bytes | None:
        blob = self._bucket.blob(f"{self.prefix}/{relative}")
        try:
            return blob.download_as_bytes()
        except Exception:  # noqa: BLE001 - absent
            return None

    def write(self, relative: str, data: bytes, keep_mtime: bool = True) -> None:
        self._bucket.blob(f"{self.prefix}/{relative}").upload_from_string(data)

    def delete(self, relative: str) -> None:
        self._bucket.blob(f"{self.prefix}/{relative}").delete()

    def files(self, prefix: str) -> list[str]:
        return sorted(self.tree(prefix))


class S3Env(_BucketEnv):
    """A prefix of an S3 bucket (the moto server), read and changed with raw ListObjectsV2, GetObject,
    PutObject and DeleteObject requests. A file's identity in a tree is its ETag, size and
    LastModified (GCS's is crc32c, size and generation): a rewrite shows even with the same bytes."""

    name = "s3"

    def __init__(self, bucket: str) -> None:
        self.bucket_name = bucket[len("s3://") :]

    def _request(self, method: str, key: str = "", **kwargs):
        from spark_webdataset.storage.s3 import client

        return client().request(method, self.bucket_name, key, **kwargs)

    def fresh(self) -> None:
        self.prefix = uuid.uuid4().hex[:12]
        self.base = f"s3://{self.bucket_name}/{self.prefix}"
        self.root = f"{self.base}/ds"
        for relative, data in OUTSIDE.items():
            self._put(f"{self.prefix}/{relative}", data)

    def _put(self, key: str, data: bytes) -> None:
        response = self._request("PUT", key, body=data)
        assert response.status == 200, f"PUT {key}: HTTP {response.status} {response.body[:200]!r}"

    def _listing(self, start: str) -> list[tuple[str, str]]:
        """(key, identity) of every object whose key starts with `start`, page after page."""
        from xml.etree import ElementTree

        out, token = [], None
        while True:
            query = {"list-type": "2", "prefix": start, **({"continuation-token": token} if token else {})}
            response = self._request("GET", query=query)
            assert response.status == 200, f"LIST {start}: HTTP {response.status} {response.body[:200]!r}"
            root = ElementTree.fromstring(response.body)
            for item in root.iterfind("{*}Contents"):
                identity = ":".join(item.findtext(f"{{*}}{field}") or "" for field in ("ETag", "Size", "LastModified"))
                out.append((item.findtext("{*}Key") or "", identity))
            token = root.findtext("{*}NextContinuationToken")
            if root.findtext("{*}IsTruncated") != "true" or not token:
                return out

    def cleanup(self) -> None:
        for key, _ in self._listing(f"{self.prefix}/"):
            self._request("DELETE", key)  # cleanup of a test prefix only: an error is not the test's

    def tree(self, prefix: str) -> dict[str, str]:
        start = self._start(prefix)
        return {key[len(start) :]: identity for key, identity in self._listing(start) if not _is_lock(key)}

    def dirs(self, prefix: str) -> set[str]:
        return {name.split("/", 1)[0] for name in self.tree(prefix) if "/" in name}

    def read(self, relative: str) -> bytes | None:
        response = self._request("GET", f"{self.prefix}/{relative}")
        return response.body if response.status == 200 else None

    def write(self, relative: str, data: bytes, keep_mtime: bool = True) -> None:
        """A plain PutObject, as a user's tool would: with a crc32c of the new bytes when their length
        is even (a tool that sends checksums), none when odd (the server then keeps none)."""
        headers = {}
        if len(data) % 2 == 0:
            from google_crc32c import value as crc32c

            headers = {"x-amz-checksum-crc32c": base64.b64encode(crc32c(data).to_bytes(4, "big")).decode()}
        response = self._request("PUT", f"{self.prefix}/{relative}", headers=headers, body=data)
        assert response.status == 200, f"PUT {relative}: HTTP {response.status} {response.body[:200]!r}"

    def delete(self, relative: str) -> None:
        response = self._request("DELETE", f"{self.prefix}/{relative}")
        assert response.status in (200, 204), f"DELETE {relative}: HTTP {response.status}"

    def files(self, prefix: str) -> list[str]:
        return sorted(self.tree(prefix))


def temp_dir(prefix: str) -> str:
    return tempfile.mkdtemp(prefix=prefix)
