"""Local and POSIX paths (NFS, mounted volumes): the embedded default."""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from typing import BinaryIO

from .base import PreconditionFailed, Storage, StorageError


def local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStorage(Storage):
    def join(self, base: str, *parts: str) -> str:
        return os.path.join(local_path(base), *parts)

    def open_write(self, path: str) -> BinaryIO:
        path = local_path(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "wb", buffering=1 << 20)

    def open_read(self, path: str) -> BinaryIO:
        try:
            return open(local_path(path), "rb", buffering=1 << 20)
        except FileNotFoundError:
            raise StorageError(f"{path}: no such file") from None

    def exists(self, path: str) -> bool:
        return os.path.exists(local_path(path))

    def list_sizes(self, directory: str) -> dict[str, int]:
        try:
            entries = list(os.scandir(local_path(directory)))
        except FileNotFoundError:
            return {}
        return {e.name: e.stat().st_size for e in entries if e.is_file(follow_symlinks=False)}

    def list_dirs(self, directory: str) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(local_path(directory)) if e.is_dir())
        except FileNotFoundError:
            return []

    def delete(self, path: str) -> None:
        try:
            os.remove(local_path(path))
        except FileNotFoundError:
            pass

    def delete_tree(self, directory: str) -> None:
        shutil.rmtree(local_path(directory), ignore_errors=True)

    def rename(self, source: str, target: str) -> None:
        target = local_path(target)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.replace(local_path(source), target)

    def _write_temp(self, path: str, data: bytes) -> str:
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, exist_ok=True)
        temp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        with open(temp, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        return temp

    def write_atomic(self, path: str, data: bytes) -> None:
        path = local_path(path)
        temp = self._write_temp(path, data)
        os.replace(temp, path)
        _fsync_dir(os.path.dirname(path) or ".")

    def create_only(self, path: str, data: bytes) -> None:
        path = local_path(path)
        temp = self._write_temp(path, data)
        try:
            os.link(temp, path)  # fails if `path` exists: the create-only commit point
        except FileExistsError:
            raise PreconditionFailed(f"{path} exists already") from None
        finally:
            os.remove(temp)
        _fsync_dir(os.path.dirname(path) or ".")

    def read_versioned(self, path: str) -> tuple[bytes | None, object]:
        try:
            with open(local_path(path), "rb") as stream:
                data = stream.read()
        except FileNotFoundError:
            return None, None
        return data, data

    def replace_if(self, path: str, data: bytes, token: object) -> bool:
        path = local_path(path)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        # A lock file beside the object serializes writers across processes;
        # readers never take it (the replace itself is atomic).
        lock_path = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.lock")
        with open(lock_path, "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current, _ = self.read_versioned(path)
            if current != token:
                return False
            self.write_atomic(path, data)
            return True
