"""Spark's Python daemon for the tests: reused workers (Spark's default) that keep their coverage.

A reused worker never exits on its own: the daemon SIGKILLs it when idle and
SIGHUPs it at shutdown, so coverage's exit hook never runs. Each task's lines
are saved when the task ends instead. Set by conftest as spark.python.daemon.module.
"""

from __future__ import annotations

import socket

import pyspark.daemon as daemon

_task = daemon.worker


def _task_then_save(sock: socket.socket, authenticated: bool) -> int:
    try:
        return _task(sock, authenticated)
    finally:
        import coverage

        current = coverage.Coverage.current()
        if current is not None:
            current.save()


if __name__ == "__main__":
    daemon.worker = _task_then_save
    daemon.manager()
