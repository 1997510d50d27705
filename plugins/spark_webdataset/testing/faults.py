"""Named points in the commit protocol where a test can make the process fail or freeze.

The product calls `point("commit:journal-written")` at each step; it does
nothing unless a test installed an action for that name, in this process
(`install`) or in a process it starts (the environment variable
`SPARK_WEBDATASET_FAULTS="commit:renamed-one=stop,publish:sealed=exit"`).
Each action runs the first time its point is reached, once per process
(a point inside parallel renames is reached by several threads). Actions:
`stop` freezes the whole process with SIGSTOP at that point (a GC
pause or a stopped VM, resumed by the test's SIGCONT), `exit` kills it
(`os._exit(17)`), `raise` raises `InjectedFault`, `sleep:S` waits S seconds.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable

ENV = "SPARK_WEBDATASET_FAULTS"


class InjectedFault(RuntimeError):
    """Raised at a fault point by the `raise` action."""


_installed: dict[str, Callable[[], None]] = {}
_from_env: dict[str, str] | None = None


def _action(spec: str) -> Callable[[], None]:
    if spec == "stop":
        return lambda: os.kill(os.getpid(), signal.SIGSTOP)
    if spec == "exit":
        return lambda: os._exit(17)
    if spec == "raise":

        def fail() -> None:
            raise InjectedFault("injected test fault")

        return fail
    if spec.startswith("sleep:"):
        seconds = float(spec[len("sleep:") :])
        return lambda: time.sleep(seconds)
    raise ValueError(f"{ENV}: unknown fault action {spec!r} (stop, exit, raise, sleep:S)")


def _environment() -> dict[str, str]:
    global _from_env
    if _from_env is None:
        text = os.environ.get(ENV, "")
        _from_env = dict(item.split("=", 1) for item in text.split(",") if item)
    return _from_env


_lock = threading.Lock()


def point(name: str) -> None:
    """A step of the protocol was reached: run the action installed for it, if any (once)."""
    if not _installed and not _environment():
        return  # the product's path: a dict lookup, no lock
    with _lock:
        action = _installed.pop(name, None)
        if action is None and name in _environment():
            action = _action(_environment().pop(name))
    if action is not None:
        action()


def install(name: str, action: str | Callable[[], None]) -> None:
    _installed[name] = _action(action) if isinstance(action, str) else action


def clear() -> None:
    _installed.clear()
