"""Where datasets live: one small interface, a backend per URI scheme.

Storage knows nothing of tar; the writer, validator and publisher use only
this interface, so a `gs://` or `s3://` root works wherever a local path does.
"""

from __future__ import annotations

from ..errors import StorageError, UnsupportedScheme
from .base import Storage
from .local import LocalStorage


def storage_for(uri: str) -> Storage:
    """The backend for `uri` (a local path, file://, gs:// or s3://)."""
    if uri.startswith("gs://"):
        from .gcs import GCSStorage

        return GCSStorage()
    if uri.startswith("s3://"):
        from .s3 import S3Storage

        return S3Storage()
    if "://" in uri and not uri.startswith("file://"):
        raise UnsupportedScheme(
            f"{uri}: unsupported URI scheme {uri.split('://')[0]!r} (use a local path, file://, gs:// or s3://)"
        )
    return LocalStorage()


__all__ = ["Storage", "StorageError", "LocalStorage", "storage_for"]
