"""Which files of a directory any process opened, from the kernel's inotify events (Linux): a count
of real opens that changes nothing about the files (an atime trick would move their ctime, which
validation reads as a storage identity)."""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager

IN_OPEN = 0x00000020
IN_NONBLOCK = 0o4000
_EVENT = struct.Struct("iIII")


@contextmanager
def opened_files(directory: str) -> Iterator[set[str]]:
    """Yields a set that, after the block, holds the names of the files opened in `directory`."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = libc.inotify_init1(IN_NONBLOCK)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    names: set[str] = set()
    try:
        if libc.inotify_add_watch(fd, os.fsencode(directory), IN_OPEN) < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory}")
        yield names
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            at = 0
            while at < len(data):
                _, mask, _, length = _EVENT.unpack_from(data, at)
                name = data[at + _EVENT.size : at + _EVENT.size + length].rstrip(b"\0").decode()
                if mask & IN_OPEN and name:
                    names.add(name)
                at += _EVENT.size + length
    finally:
        os.close(fd)
