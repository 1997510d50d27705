"""Where datasets live: one small interface, a backend per URI scheme.

Storage knows nothing of tar; the writer, validator and publisher use only
this interface, so a `gs://` root works wherever a local path does.
"""

from __future__ import annotations

from .base import Storage, StorageError
from .local import LocalStorage


def storage_for(uri: str) -> Storage:
    """The backend for `uri` (a local path, file://, or gs://)."""
    if uri.startswith("gs://"):
        raise StorageError(
            f"{uri}: gs:// storage is not available in this build yet; write to a local path"
        )
    return LocalStorage()


__all__ = ["Storage", "StorageError", "LocalStorage", "storage_for"]
