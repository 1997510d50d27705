"""Amazon S3 and S3-compatible stores (`s3://bucket/path`), over plain HTTPS with SigV4.

Why no SDK: botocore (so boto3, s3fs, moto) requires python-dateutil < 3, and the project pins
4.0.0 (Airflow 3.3's resolution); obstore has no crc32c checksum and no conditional DELETE. The
S3 calls the protocol needs are few, so this module signs them itself (docs/s3.md).

Shards stream out through multipart uploads (memory: one part, never a whole shard) and stream
in through ranged GETs. Create-only writes use `If-None-Match: *` (PutObject,
CompleteMultipartUpload); compare-and-swap and conditional deletes use `If-Match: <etag>`. S3 has
no rename: `rename_new` copies server-side into a multipart upload completed with
`If-None-Match: *`, then deletes the source. Every write carries its crc32c
(`x-amz-checksum-crc32c`, FULL_OBJECT for multipart), which the server keeps and HEAD returns,
so the commit checks it as GCS's. A 412 on a retried conditional write is settled by reading
the object back. A bucket's endpoint, region and keys come from storage/s3_config.py (the AWS
chain, config files, a profile per bucket); nothing secret is ever logged.
"""

from __future__ import annotations

import base64
import datetime
import functools
import hashlib
import hmac
import io
import os
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import quote

from google_crc32c import extend as _crc32c_extend

from ..errors import PreconditionFailed, StorageError
from . import s3_config
from .base import RangeFile, Storage, StoredObject, split_bucket
from .s3_config import Credentials

# A multipart part: a task's worker holds about one (the buffer) plus the request's copy. S3's
# minimum part is 5 MiB; 8 MiB matches the gs:// chunk.
PART_BYTES = 8 * 1024 * 1024
COPY_PART_BYTES = 1024 * 1024 * 1024  # UploadPartCopy takes at most 5 GiB a part
HTTP_POOL_CONNECTIONS = 32
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})  # 409: ConditionalRequestConflict
RETRY_SECONDS = 300.0
# A server that refuses connections or never answers is a wrong endpoint more often than a blip:
# botocore's standard mode makes 3 attempts; we make 4 (~1.4 s of back-off), then say so.
CONNECT_ATTEMPTS = 4
UNSIGNED = "UNSIGNED-PAYLOAD"  # the body's integrity is the crc32c header, checked by the server


def split(uri: str) -> tuple[str, str]:
    return split_bucket(uri, "s3")


@functools.cache
def _session_for_process(pid: int):
    import requests
    from requests.adapters import HTTPAdapter

    session = requests.Session()
    adapter = HTTPAdapter(pool_connections=HTTP_POOL_CONNECTIONS, pool_maxsize=HTTP_POOL_CONNECTIONS)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def error_code(self) -> str:
        try:
            return ElementTree.fromstring(self.body).findtext("Code") or ""
        except ElementTree.ParseError:
            return ""


class S3Client:
    """Signed requests to one endpoint and region with one set of keys (`settings`: the
    process-wide ones if None), with retries on 408/409/429/5xx and dropped connections (the body
    is always bytes, so a retry resends it whole)."""

    def __init__(self, settings: s3_config.Settings | None = None, clock=time.time) -> None:
        settings = settings or s3_config.settings(None)
        self.region, self.endpoint = settings.region, settings.endpoint
        self._credentials = s3_config.credentials(settings, clock)

    @property
    def credentials(self) -> Credentials:
        """The keys to sign with now: temporary ones are refreshed before they expire."""
        return self._credentials.current()

    def url(self, bucket: str, key: str, query: dict[str, str] | None = None) -> tuple[str, str, str, str]:
        """(url, host, canonical path, canonical query): path-style on a custom endpoint,
        virtual-hosted on AWS."""
        if self.endpoint:
            base, path = self.endpoint, f"/{bucket}/{quote(key, safe='/-_.~')}"
        else:
            base, path = f"https://{bucket}.s3.{self.region}.amazonaws.com", f"/{quote(key, safe='/-_.~')}"
        host = base.split("://", 1)[1].split("/", 1)[0]
        canonical_query = "&".join(
            f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted((query or {}).items())
        )
        return f"{base}{path}" + (f"?{canonical_query}" if canonical_query else ""), host, path, canonical_query

    def _signed(
        self,
        method: str,
        host: str,
        path: str,
        query: str,
        headers: dict[str, str],
        now: datetime.datetime | None = None,
    ) -> dict[str, str]:
        """SigV4 headers: host and every x-amz-* header signed, the payload UNSIGNED (its crc32c is
        in a signed header where it matters)."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        signed = {k.lower(): v.strip() for k, v in headers.items() if k.lower().startswith("x-amz-")}
        signed.update({"host": host, "x-amz-date": stamp, "x-amz-content-sha256": UNSIGNED})
        credentials = self.credentials  # one snapshot: key, secret and token of the same fetch
        if credentials.token:
            signed["x-amz-security-token"] = credentials.token
        names = sorted(signed)
        canonical = "\n".join(
            [method, path, query, *(f"{n}:{signed[n]}" for n in names), "", ";".join(names), UNSIGNED]
        )
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = _hmac(
            _hmac(_hmac(_hmac(f"AWS4{credentials.secret_key}".encode(), day), self.region), "s3"), "aws4_request"
        )
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        out = {**headers, **{n: signed[n] for n in names if n != "host"}}
        out["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={';'.join(names)}, Signature={signature}"
        )
        return out

    def request(
        self,
        method: str,
        bucket: str,
        key: str = "",
        *,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> Response:
        import requests

        url, host, path, canonical_query = self.url(bucket, key, query)
        deadline, delay = time.monotonic() + RETRY_SECONDS, 0.2
        unanswered = 0
        while True:
            try:
                reply = _session_for_process(os.getpid()).request(
                    method,
                    url,
                    data=body or None,
                    headers=self._signed(method, host, path, canonical_query, dict(headers or {})),
                    timeout=(30, 300),
                )
                response = Response(reply.status_code, {k.lower(): v for k, v in reply.headers.items()}, reply.content)
                if response.status not in RETRY_STATUSES or time.monotonic() > deadline:
                    return response
            except (requests.ConnectionError, requests.Timeout) as error:
                unanswered += 1
                if unanswered >= CONNECT_ATTEMPTS or time.monotonic() > deadline:
                    raise StorageError(
                        f"s3://{bucket}/{key}: {method} to {url.split('/')[2]} failed {unanswered} times: {error}"
                    ) from None
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


@functools.cache
def _client_for_process(pid: int, settings: s3_config.Settings, chain: tuple[str | None, ...]) -> S3Client:
    return S3Client(settings)


def client_for(bucket: str | None) -> S3Client:
    """The bucket's client: one per process (sessions do not survive fork) and per what differs
    between buckets (profile, endpoint, region) and, for the process-wide chain, its variables."""
    settings = s3_config.settings(bucket)
    chain = s3_config.chain_environment() if settings.profile is None else ()
    return _client_for_process(os.getpid(), settings, chain)


class _Clients:
    """`client().request(method, bucket, ...)`: each request goes to its bucket's client."""

    def request(self, method: str, bucket: str, key: str = "", **kwargs) -> Response:
        return client_for(bucket).request(method, bucket, key, **kwargs)


_CLIENTS = _Clients()


def client() -> _Clients:
    """The requests of this process, each signed and sent as its bucket's settings say."""
    return _CLIENTS


def _failure(path: str, what: str, response: Response) -> StorageError:
    code = response.error_code()
    if code == "NoSuchBucket":
        return StorageError(f"{path}: there is no bucket {split(path)[0]!r}")
    return StorageError(f"{path}: {what} failed: HTTP {response.status} {code}".rstrip())


def crc32c_text(crc: int) -> str:
    """Base64 of the big-endian value: S3's x-amz-checksum-crc32c, GCS's crc32c (storage/ may not
    import format/, which has the same two lines for the writer)."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def _crc_headers(data: bytes) -> dict[str, str]:
    return {"x-amz-sdk-checksum-algorithm": "CRC32C", "x-amz-checksum-crc32c": crc32c_text(_crc32c_extend(0, data))}


def _xml(body: bytes) -> ElementTree.Element:
    try:
        return ElementTree.fromstring(body)
    except ElementTree.ParseError as error:
        raise StorageError(f"an S3 response is not XML: {error}") from None


class MultipartWriter(io.RawIOBase):
    """A write stream: parts of PART_BYTES go out as they fill; a shard smaller than one part is
    one PutObject. `if_none_match` makes the completion create-only."""

    def __init__(self, storage: S3Storage, path: str, if_none_match: bool = False) -> None:
        self.storage, self.path, self.if_none_match = storage, path, if_none_match
        self.bucket, self.key = split(path)
        self.buffer = bytearray()
        self.crc = 0
        self.upload_id: str | None = None
        self.parts: list[tuple[int, str, str]] = []
        self.aborted = False

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        view = memoryview(data).cast("B")
        if self.aborted:
            return len(view)  # the stream's close flushes its buffer here: an aborted upload takes none of it
        self.buffer += view
        while len(self.buffer) >= PART_BYTES:
            self._send_part(bytes(self.buffer[:PART_BYTES]))
            del self.buffer[:PART_BYTES]
        return len(view)

    def _send_part(self, data: bytes) -> None:
        if self.upload_id is None:
            self.upload_id = self.storage._create_upload(self.path)
        number = len(self.parts) + 1
        self.crc = _crc32c_extend(self.crc, data)  # of the whole object, part after part
        headers = _crc_headers(data)
        response = client().request(
            "PUT",
            self.bucket,
            self.key,
            query={"partNumber": str(number), "uploadId": self.upload_id or ""},
            headers=headers,
            body=data,
        )
        if response.status != 200:
            raise _failure(self.path, f"UploadPart {number}", response)
        self.parts.append((number, response.headers.get("etag", ""), headers["x-amz-checksum-crc32c"]))

    def close(self) -> None:
        if self.closed:
            return
        if self.aborted:
            super().close()
            return
        try:
            if self.upload_id is None:
                self.storage._put(self.path, bytes(self.buffer), {"If-None-Match": "*"} if self.if_none_match else {})
            else:
                if self.buffer:
                    self._send_part(bytes(self.buffer))
                self.buffer = bytearray()
                self.storage._complete(self.path, self.upload_id, self.parts, crc32c_text(self.crc), self.if_none_match)
        except BaseException:
            self.abort()
            raise
        finally:
            super().close()

    def abort(self) -> None:
        if self.upload_id is not None:
            self.storage._abort_upload(self.path, self.upload_id)
            self.upload_id = None

    def __del__(self) -> None:
        # Dropped without close(): IOBase's finalizer would close, and so complete, a partial
        # upload, with no lock or lease around it. An upload never completed is no object (the
        # bucket's AbortIncompleteMultipartUpload rule reclaims its parts: docs/s3.md).
        self.aborted = True
        super().__del__()


class _UploadStream(io.BufferedWriter):
    """Closing completes the upload; leaving a `with` block by an exception aborts it instead, and
    a stream dropped unclosed completes nothing: a failed writer never leaves a partial object
    under its name."""

    def __exit__(self, kind, value, traceback):
        if kind is None:
            return super().__exit__(kind, value, traceback)
        raw = self.raw
        raw.abort()  # type: ignore[attr-defined]
        raw.aborted = True  # type: ignore[attr-defined]
        self.close()
        return None

    def __del__(self) -> None:
        self.raw.aborted = True  # type: ignore[attr-defined]  # never completed by a finalizer (see MultipartWriter)
        super().__del__()


class S3Storage(Storage):
    # A rename is three requests and a delete: latency-bound, so the commit runs many at once.
    concurrent_requests = 16

    def join(self, base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])

    # -- single objects ---------------------------------------------------------------------------

    def _put(self, path: str, data: bytes, conditions: dict[str, str]) -> Response:
        bucket, key = split(path)
        response = client().request("PUT", bucket, key, headers={**_crc_headers(data), **conditions}, body=data)
        if response.status not in (200, 412):
            raise _failure(path, "PutObject", response)
        return response

    def _create_upload(self, path: str) -> str:
        """CreateMultipartUpload with a whole-object crc32c; its upload id."""
        bucket, key = split(path)
        response = client().request(
            "POST", bucket, key, query={"uploads": ""},
            headers={"x-amz-checksum-algorithm": "CRC32C", "x-amz-checksum-type": "FULL_OBJECT"},
        )  # fmt: skip
        upload_id = _xml(response.body).findtext("{*}UploadId") if response.status == 200 else None
        if not upload_id:
            raise _failure(path, "CreateMultipartUpload", response)
        return upload_id

    def _abort_upload(self, path: str, upload_id: str) -> None:
        bucket, key = split(path)
        client().request("DELETE", bucket, key, query={"uploadId": upload_id})

    def _complete(
        self, path: str, upload_id: str, parts: list[tuple[int, str, str]], crc: str, if_none_match: bool
    ) -> None:
        bucket, key = split(path)
        body = (
            "<CompleteMultipartUpload>"
            + "".join(
                f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag><ChecksumCRC32C>{part_crc}</ChecksumCRC32C></Part>"
                for n, etag, part_crc in parts
            )
            + "</CompleteMultipartUpload>"
        )
        headers = {"x-amz-checksum-type": "FULL_OBJECT"}
        if crc:  # the whole object's: the server refuses the completion if its own differs
            headers["x-amz-checksum-crc32c"] = crc
        if if_none_match:
            headers["If-None-Match"] = "*"
        response = client().request(
            "POST", bucket, key, query={"uploadId": upload_id}, headers=headers, body=body.encode()
        )
        if response.status == 412:
            raise PreconditionFailed(f"{path} exists already")
        # a 200 can still carry an error (S3 sends the status before it finishes)
        if response.status != 200 or _xml(response.body).tag.endswith("Error"):
            raise _failure(path, "CompleteMultipartUpload", response)

    def _head(self, path: str) -> dict[str, str] | None:
        bucket, key = split(path)
        response = client().request("HEAD", bucket, key, headers={"x-amz-checksum-mode": "ENABLED"})
        if response.status == 404:
            return None
        if response.status != 200:
            raise _failure(path, "HeadObject", response)
        return response.headers

    def open_write(self, path: str) -> BinaryIO:
        return _UploadStream(MultipartWriter(self, path), buffer_size=1 << 20)  # type: ignore[return-value]

    def open_read(self, path: str) -> BinaryIO:
        head = self._head(path)
        if head is None:
            raise StorageError(f"{path}: no such object")
        return io.BufferedReader(RangeFile(self, path, int(head["content-length"])), buffer_size=PART_BYTES)  # type: ignore[return-value]

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """One GET with a Range header, no metadata request."""
        if length <= 0:
            return b""
        bucket, key = split(path)
        response = client().request("GET", bucket, key, headers={"Range": f"bytes={offset}-{offset + length - 1}"})
        if response.status == 404:
            raise StorageError(f"{path}: no such object")
        if response.status == 416:
            return b""  # past the object's end
        if response.status not in (200, 206):
            raise _failure(path, "GetObject", response)
        return response.body if response.status == 206 else response.body[offset : offset + length]

    def read_bytes(self, path: str) -> bytes:
        data, _ = self.read_versioned(path)
        if data is None:
            raise StorageError(f"{path}: no such object")
        return data

    def exists(self, path: str) -> bool:
        return self._head(path) is not None

    # -- listings ---------------------------------------------------------------------------------

    def _list(self, directory: str, delimiter: bool = True):
        """Every object below `directory` (one level if `delimiter`), page by page, as
        (relative name, size, etag, last modified), and the sub-prefixes."""
        bucket, prefix = split(directory)
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        objects, prefixes, token = [], [], None
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if delimiter:
                query["delimiter"] = "/"
            if token:
                query["continuation-token"] = token
            response = client().request("GET", bucket, query=query)
            if response.status != 200:
                raise _failure(directory, "ListObjectsV2", response)
            root = _xml(response.body)
            for item in root.iterfind("{*}Contents"):
                name = item.findtext("{*}Key") or ""
                if name != prefix:
                    modified = datetime.datetime.fromisoformat(
                        (item.findtext("{*}LastModified") or "").replace("Z", "+00:00")
                    )
                    objects.append(
                        (name[len(prefix) :], int(item.findtext("{*}Size") or 0), item.findtext("{*}ETag"), modified)
                    )
            prefixes += [
                (p.findtext("{*}Prefix") or "")[len(prefix) :].rstrip("/") for p in root.iterfind("{*}CommonPrefixes")
            ]
            token = root.findtext("{*}NextContinuationToken")
            if root.findtext("{*}IsTruncated") != "true" or not token:
                return objects, prefixes

    def list_sizes(self, directory: str) -> dict[str, int]:
        return {name: size for name, size, _, _ in self._list(directory)[0]}

    def list_dirs(self, directory: str) -> list[str]:
        return sorted(self._list(directory)[1])

    def identities(self, directory: str) -> dict[str, object]:
        return {name: etag for name, _, etag, _ in self._list(directory)[0]}

    def objects(self, directory: str) -> dict[str, StoredObject]:
        """A listing carries no checksum values: one HEAD an object for them (docs/s3.md, costs)."""
        listed = self._list(directory)[0]
        crcs = self._crcs([self.join(directory, name) for name, _, _, _ in listed])
        return {name: StoredObject(size, etag, crcs.get(self.join(directory, name))) for name, size, etag, _ in listed}

    def _crcs(self, paths: list[str]) -> dict[str, str | None]:
        from concurrent.futures import ThreadPoolExecutor

        def crc(path: str) -> str | None:
            head = self._head(path)
            return None if head is None else head.get("x-amz-checksum-crc32c")

        with ThreadPoolExecutor(max_workers=self.concurrent_requests, thread_name_prefix="s3-head") as pool:
            return dict(zip(paths, pool.map(crc, paths)))

    def crc32c_below(self, directory: str) -> dict[str, str] | None:
        """A listing, then one HEAD an object: S3 returns checksums only per object."""
        names = [name for name, _, _, _ in self._list(directory, delimiter=False)[0]]
        crcs = self._crcs([self.join(directory, name) for name in names])
        return {name: crcs[self.join(directory, name)] for name in names}  # type: ignore[misc]

    def newest_modification(self, directory: str) -> float | None:
        times = [modified.timestamp() for _, _, _, modified in self._list(directory, delimiter=False)[0]]
        return max(times) if times else None

    def remove_empty_dir(self, directory: str) -> None:
        pass

    # -- deletes ----------------------------------------------------------------------------------

    def _delete(self, path: str, conditions: dict[str, str]) -> Response:
        bucket, key = split(path)
        response = client().request("DELETE", bucket, key, headers=conditions)
        if response.status not in (200, 204, 404, 412):
            raise _failure(path, "DeleteObject", response)
        return response

    def delete(self, path: str) -> None:
        self._delete(path, {})

    def delete_tree(self, directory: str) -> None:
        from concurrent.futures import ThreadPoolExecutor

        paths = [self.join(directory, name) for name, _, _, _ in self._list(directory, delimiter=False)[0]]
        with ThreadPoolExecutor(max_workers=self.concurrent_requests, thread_name_prefix="s3-delete") as pool:
            for _ in pool.map(self.delete, paths):
                pass

    def delete_if(self, path: str, token: object) -> bool:
        """DeleteObject with `If-Match: <etag>`: 412 if another object took the name, 404 if gone."""
        if token is None:
            return False
        response = self._delete(path, {"If-Match": str(token)})
        return response.status in (200, 204)

    def delete_if_identity(self, path: str, identity: object) -> bool:
        return self.delete_if(path, identity)

    # -- renames ----------------------------------------------------------------------------------

    def _copy_new(self, source: str, target: str) -> None:
        """A server-side copy into a multipart upload completed with `If-None-Match: *` (CopyObject
        takes no precondition on its destination), checked against the source's size and crc32c."""
        source_head = self._head(source)
        if source_head is None:
            raise StorageError(f"{source}: no such object")
        size = int(source_head["content-length"])
        source_bucket, source_key = split(source)
        target_bucket, target_key = split(target)
        upload_id = self._create_upload(target)
        parts: list[tuple[int, str, str]] = []
        try:
            for number, start in enumerate(range(0, max(size, 1), COPY_PART_BYTES), start=1):
                headers = {"x-amz-copy-source": f"/{source_bucket}/{quote(source_key, safe='/-_.~')}"}
                if size:
                    headers["x-amz-copy-source-range"] = f"bytes={start}-{min(size, start + COPY_PART_BYTES) - 1}"
                response = client().request(
                    "PUT",
                    target_bucket,
                    target_key,
                    query={"partNumber": str(number), "uploadId": upload_id},
                    headers=headers,
                )
                if response.status != 200:
                    raise _failure(target, f"UploadPartCopy from {source}", response)
                result = _xml(response.body)
                etag = result.findtext("{*}ETag") or response.headers.get("etag", "")
                part_crc = result.findtext("{*}ChecksumCRC32C") or response.headers.get("x-amz-checksum-crc32c", "")
                parts.append((number, etag, part_crc))
            self._complete(target, upload_id, parts, source_head.get("x-amz-checksum-crc32c", ""), True)
        except BaseException:
            self._abort_upload(target, upload_id)
            raise
        target_head = self._head(target) or {}
        if (target_head.get("content-length"), target_head.get("x-amz-checksum-crc32c")) != (
            source_head.get("content-length"),
            source_head.get("x-amz-checksum-crc32c"),
        ):
            raise StorageError(
                f"{target}: copy of {source} does not match it (size {target_head.get('content-length')} vs "
                f"{source_head.get('content-length')}, crc32c {target_head.get('x-amz-checksum-crc32c')} vs "
                f"{source_head.get('x-amz-checksum-crc32c')})"
            )

    def rename_new(self, source: str, target: str) -> None:
        self._copy_new(source, target)
        self.delete(source)

    def same_object(self, first: str, second: str) -> bool:
        heads = [self._head(first), self._head(second)]
        if heads[0] is None or heads[1] is None:
            return False
        keys = ("content-length", "x-amz-checksum-crc32c")
        return [heads[0].get(k) for k in keys] == [heads[1].get(k) for k in keys] and heads[0].get(
            "x-amz-checksum-crc32c"
        ) is not None

    # -- small objects: atomic, create-only, compare-and-swap ------------------------------------

    def write_atomic(self, path: str, data: bytes) -> None:
        self._put(path, data, {})

    def _conditional_put(self, path: str, data: bytes, conditions: dict[str, str]) -> bool:
        """PutObject under `conditions`; a 412 is settled by reading back (a retried request whose
        first attempt landed sees its own write)."""
        if self._put(path, data, conditions).status == 200:
            return True
        current, _ = self.read_versioned(path)
        return current == data

    def create_only(self, path: str, data: bytes) -> None:
        if not self._conditional_put(path, data, {"If-None-Match": "*"}):
            raise PreconditionFailed(f"{path} exists already")

    def read_versioned(self, path: str) -> tuple[bytes | None, object]:
        """The bytes and their ETag, from one GET (S3's GET is a consistent snapshot of one object)."""
        bucket, key = split(path)
        response = client().request("GET", bucket, key)
        if response.status == 404:
            if response.error_code() == "NoSuchBucket":
                raise _failure(path, "GetObject", response)
            return None, None
        if response.status != 200:
            raise _failure(path, "GetObject", response)
        return response.body, response.headers.get("etag")

    def replace_if(self, path: str, data: bytes, token: object) -> bool:
        """If-Match on the ETag; a token of an absent object (None) is a create-only write."""
        conditions = {"If-None-Match": "*"} if token is None else {"If-Match": str(token)}
        bucket, key = split(path)
        response = client().request("PUT", bucket, key, headers={**_crc_headers(data), **conditions}, body=data)
        if response.status == 200:
            return True
        if response.status not in (404, 412):  # 404: If-Match on an object deleted meanwhile
            raise _failure(path, "PutObject", response)
        current, _ = self.read_versioned(path)
        return current == data
