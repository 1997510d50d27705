"""Local and POSIX paths (NFS, mounted volumes): the embedded default."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from typing import BinaryIO, TypeVar

from ..errors import PreconditionFailed, StorageError
from .base import Storage

T = TypeVar("T")


def local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def _identity(status: os.stat_result) -> tuple[int, int, int, int]:
    """Which file holds a name: inode, mtime, ctime, size. A user can set mtime back (`os.utime`),
    never ctime: any write to the bytes, or the utime that hides it, moves ctime."""
    return status.st_ino, status.st_mtime_ns, status.st_ctime_ns, status.st_size


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStorage(Storage):
    # A rename is one os.replace (tens of microseconds): threads only add GIL handoffs. Measured
    # with bench/commit_scaling.py (1, 4, 8, 16 threads): one is fastest.
    concurrent_requests = 1

    def join(self, base: str, *parts: str) -> str:
        return os.path.join(local_path(base), *parts)

    def open_write(self, path: str) -> BinaryIO:
        path = local_path(path)
        return _in_new_dir(os.path.dirname(path), lambda: open(path, "wb", buffering=1 << 20))

    def open_read(self, path: str) -> BinaryIO:
        try:
            return open(local_path(path), "rb", buffering=1 << 20)
        except FileNotFoundError:
            raise StorageError(f"{path}: no such file") from None
        except OSError as error:  # a name too long, a directory, no permission: the path's fault
            raise StorageError(f"{path}: cannot open it: {error.strerror}") from None

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        try:
            descriptor = os.open(local_path(path), os.O_RDONLY)
        except FileNotFoundError:
            raise StorageError(f"{path}: no such file") from None
        except OSError as error:
            raise StorageError(f"{path}: cannot open it: {error.strerror}") from None
        try:
            return os.pread(descriptor, length, offset)
        finally:
            os.close(descriptor)

    def exists(self, path: str) -> bool:
        return os.path.exists(local_path(path))

    def list_sizes(self, directory: str) -> dict[str, int]:
        try:
            entries = list(os.scandir(local_path(directory)))
        except (FileNotFoundError, NotADirectoryError):
            return {}
        return {e.name: e.stat().st_size for e in entries if e.is_file(follow_symlinks=False)}

    def list_dirs(self, directory: str) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(local_path(directory)) if e.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def delete(self, path: str) -> None:
        try:
            os.remove(local_path(path))
        except FileNotFoundError:
            pass

    def newest_modification(self, directory: str) -> float | None:
        newest = None
        for base, _, files in os.walk(local_path(directory)):
            for name in [*files, "."]:
                try:
                    mtime = os.stat(os.path.join(base, name)).st_mtime
                except FileNotFoundError:
                    continue
                newest = mtime if newest is None else max(newest, mtime)
        return newest

    def remove_empty_dir(self, directory: str) -> None:
        """Remove `directory` if nothing is in it but the lock files of objects that are gone."""
        directory = local_path(directory)
        try:
            names = os.listdir(directory)
        except OSError:
            return  # gone, or not a directory
        for name in names:
            if _LOCK_FILE.fullmatch(name) and not os.path.lexists(os.path.join(directory, name[1 : -len(".lock")])):
                _remove_lock_file(os.path.join(directory, name), os.path.join(directory, name[1 : -len(".lock")]))
        try:
            os.rmdir(directory)
        except OSError:
            pass  # not empty, or gone

    def missing_dirs(self, directory: str) -> list[str]:
        missing, path = [], local_path(directory)
        while path and not os.path.lexists(path):
            missing.append(path)
            parent = os.path.dirname(path)
            path = parent if parent != path else ""
        return missing

    def delete_tree(self, directory: str) -> None:
        shutil.rmtree(local_path(directory), ignore_errors=True)

    def rename_new(self, source: str, target: str) -> None:
        target = local_path(target)
        try:
            _in_new_dir(os.path.dirname(target), lambda: os.link(local_path(source), target))
        except FileExistsError:
            raise PreconditionFailed(f"{target} exists already") from None
        os.remove(local_path(source))

    def same_object(self, first: str, second: str) -> bool:
        try:
            return os.path.samefile(local_path(first), local_path(second))  # linked, not yet unlinked
        except FileNotFoundError:
            return False

    def identities(self, directory: str) -> dict[str, object]:
        try:
            entries = list(os.scandir(local_path(directory)))
        except (FileNotFoundError, NotADirectoryError):
            return {}
        return {e.name: _identity(e.stat(follow_symlinks=False)) for e in entries if e.is_file(follow_symlinks=False)}

    def delete_if_identity(self, path: str, identity: object) -> bool:
        path = local_path(path)
        # Under a lock on the directory itself: no other conditional delete can remove this object
        # between the check and the unlink, and nothing else can take its name while it exists.
        try:
            directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(directory, fcntl.LOCK_EX)
            try:
                if _identity(os.stat(path, follow_symlinks=False)) != identity:
                    return False
                os.remove(path)
            except FileNotFoundError:
                return False
        finally:
            os.close(directory)  # releases the lock
        return True

    def _write_temp(self, path: str, data: bytes) -> str:
        directory = os.path.dirname(path) or "."
        temp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")

        def write() -> str:
            with open(temp, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
            return temp

        return _in_new_dir(directory, write)

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
        # The token is the file's identity as well as its bytes, like a GCS
        # generation: rewriting the same bytes still changes it.
        try:
            with open(local_path(path), "rb") as stream:
                data = stream.read()
                status = os.fstat(stream.fileno())
        except FileNotFoundError:
            return None, None
        except OSError as error:  # a file where a directory of the path should be, a directory, no access
            raise StorageError(f"{path}: cannot read it: {error.strerror}") from None
        return data, (status.st_ino, status.st_mtime_ns, data)

    @contextlib.contextmanager
    def _locked(self, path: str) -> Iterator[None]:
        # A lock file beside the object serializes writers across processes;
        # readers never take it (the replace itself is atomic).
        # The lock file of an object that is gone may be removed (`remove_empty_dir`): a locker
        # holds the lock only while the file it locked is still the one at that path.
        lock_path = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.lock")
        while True:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(lock_path, "a+b") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if _same_file(lock.fileno(), lock_path):
                    yield
                    return

    def replace_if(self, path: str, data: bytes, token: object) -> bool:
        path = local_path(path)
        with self._locked(path):
            _, current = self.read_versioned(path)
            if current != token:
                return False
            self.write_atomic(path, data)
            return True

    def delete_if(self, path: str, token: object) -> bool:
        path = local_path(path)
        with self._locked(path):
            _, current = self.read_versioned(path)
            if current != token:
                return False
            self.delete(path)
            return True


_CREATE_ATTEMPTS = 10
_LOCK_FILE = re.compile(r"\..+\.lock")  # `_locked`'s file beside an object: .<name>.lock


def _same_file(descriptor: int, path: str) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(descriptor).st_ino
    except FileNotFoundError:
        return False


def _remove_lock_file(lock_path: str, guarded: str) -> None:
    """Unlink a lock file whose object is gone, holding the lock itself (never one another holds)."""
    try:
        with open(lock_path, "rb") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # in use: its object is being written
            if _same_file(lock.fileno(), lock_path) and not os.path.lexists(guarded):
                os.unlink(lock_path)
    except FileNotFoundError:
        pass


def _in_new_dir(directory: str, create: Callable[[], T]) -> T:
    """Make `directory`, then `create` something in it. Another job may remove an empty parent
    meanwhile (`remove_empty_dir` of `_staging/` when its own staging is gone): make it again.
    Any other missing file (a rename's source) raises at once."""
    for attempt in range(_CREATE_ATTEMPTS):
        try:
            os.makedirs(directory, exist_ok=True)
            return create()
        except FileNotFoundError:
            if attempt == _CREATE_ATTEMPTS - 1 or os.path.isdir(directory):
                raise
    raise AssertionError("unreachable")
